-- candidate_symbols_json (SQLite): candidate_symbols with the ids as one JSON array — the
-- retriever asks for a few thousand at once, and an expanded list costs SQLAlchemy a
-- parameter each to render (~5% of a retrieval). Same columns, same order.
SELECT s.id, s.key, s.kind, s.name, s.qualname, s.parent_id, s.file_id, f.path, f.is_test,
       s.start_line
FROM recon.symbol s
JOIN recon.file f ON f.id = s.file_id
WHERE s.id IN (SELECT value FROM json_each(:symbol_ids))
ORDER BY s.id;
