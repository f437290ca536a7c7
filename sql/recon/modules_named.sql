-- modules_named: module symbols of files whose dotted module name is one of MODULES.
SELECT s.id, f.module
FROM recon.symbol s
JOIN recon.file f ON f.id = s.file_id
WHERE s.kind = 'module' AND f.module IN :modules
ORDER BY s.id;
