-- candidate_symbols: what the retriever needs to know of symbols it found (by id): key,
-- kind, name, parent, file and whether the file is a test file. The retriever unpacks the
-- columns in this order.
SELECT s.id, s.key, s.kind, s.name, s.qualname, s.parent_id, s.file_id, f.path, f.is_test,
       s.start_line
FROM recon.symbol s
JOIN recon.file f ON f.id = s.file_id
WHERE s.id IN :symbol_ids
ORDER BY s.id;
