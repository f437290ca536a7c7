-- test_functions_named: functions and methods in test files whose name is one of NAMES
-- (a failing test given by its bare name, as SWE-bench gives sympy's), with their paths.
SELECT s.id, s.name, s.key, f.path
FROM recon.symbol s
JOIN recon.file f ON f.id = s.file_id
WHERE s.name IN :names AND s.kind IN ('function', 'method') AND f.is_test
ORDER BY s.id;
