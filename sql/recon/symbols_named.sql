-- symbols_named: non-module symbols whose name or qualified name is an identifier.
SELECT s.id, s.key, f.path, s.start_line, s.end_line
FROM recon.symbol s
JOIN recon.file f ON f.id = s.file_id
WHERE s.kind <> 'module' AND (s.name = :name OR s.qualname = :name)
ORDER BY s.key;
