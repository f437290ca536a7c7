-- fts_any_terms (SQLite): symbols matching ANY of the query's terms, best BM25 first —
-- the retrieval stand-in (component 04) the A/B runner uses.
SELECT s.key, s.kind, s.signature, s.doc, bm25(symbol_fts) AS score
FROM recon.symbol_fts
JOIN recon.symbol s ON s.id = symbol_fts.rowid
WHERE symbol_fts MATCH :query
ORDER BY score, s.key
LIMIT :limit;
