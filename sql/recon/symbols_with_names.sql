-- symbols_with_names: non-module symbols whose own name is one of NAMES (exact, case
-- sensitive), with their qualified names — to resolve identifiers a task mentions.
SELECT s.id, s.name, s.qualname, f.module, f.is_test
FROM recon.symbol s
JOIN recon.file f ON f.id = s.file_id
WHERE s.name IN :names AND s.kind <> 'module'
ORDER BY s.id;
