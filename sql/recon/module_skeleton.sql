-- module_skeleton: a file's classes and functions in source order, with signatures.
SELECT s.kind, s.qualname, s.signature, s.start_line
FROM recon.symbol s
JOIN recon.file f ON f.id = s.file_id
WHERE f.path = :path AND s.kind <> 'module'
ORDER BY s.start_line, s.key;
