-- module_of_path: the module symbol of one recon file, by its exact path.
SELECT s.id
FROM recon.symbol s
JOIN recon.file f ON f.id = s.file_id
WHERE s.kind = 'module' AND f.path = :path;
