-- test_symbols_named: test functions/methods with a name, in test files, with their
-- qualified names and paths — to map `test_x (pkg.mod.Class)` ids to entity keys.
SELECT s.key, s.qualname, f.path, f.module
FROM recon.symbol s
JOIN recon.file f ON f.id = s.file_id
WHERE s.name = :name AND s.kind IN ('function', 'method')
ORDER BY s.key;
