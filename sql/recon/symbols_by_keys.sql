-- symbols_by_keys: recon symbols for a batch of entity keys, with their files' paths.
SELECT s.id, s.key, s.kind, f.path, s.start_line, s.end_line, s.signature, s.doc, f.is_test
FROM recon.symbol s
JOIN recon.file f ON f.id = s.file_id
WHERE s.key IN :entity_keys;
