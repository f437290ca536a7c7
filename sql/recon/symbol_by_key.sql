-- symbol_by_key: one recon symbol by entity key, with its file's path.
SELECT s.id, s.key, s.kind, f.path, s.start_line, s.end_line, s.signature, s.doc, f.is_test
FROM recon.symbol s
JOIN recon.file f ON f.id = s.file_id
WHERE s.key = :entity_key;
