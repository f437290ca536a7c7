-- test_file_imports: the code modules the files of a set of test symbols import, each
-- with how many test files import it — a module every test file imports (the package's
-- __init__, a test helper) says little about a failing test. Recon's imports edges run
-- from an importing module's symbol to the imported module's symbol, so both ends are
-- module symbols and a count of distinct sources is a count of files.
WITH test_modules AS (
    SELECT DISTINCT module.id
    FROM recon.symbol s
    JOIN recon.symbol module ON module.file_id = s.file_id AND module.kind = 'module'
    WHERE s.id IN :symbol_ids
),
imported AS (
    SELECT DISTINCT e.dst_symbol_id AS module_id
    FROM test_modules t
    JOIN recon.edge e ON e.src_symbol_id = t.id AND e.kind = 'imports'
    WHERE e.dst_symbol_id IS NOT NULL
)
SELECT i.module_id,
       (SELECT COUNT(DISTINCT ie.src_symbol_id)
        FROM recon.edge ie
        JOIN recon.symbol importer ON importer.id = ie.src_symbol_id
        JOIN recon.file importer_file ON importer_file.id = importer.file_id
        WHERE ie.dst_symbol_id = i.module_id AND ie.kind = 'imports'
          AND importer_file.is_test) AS test_importers
FROM imported i
JOIN recon.symbol module ON module.id = i.module_id
JOIN recon.file f ON f.id = module.file_id
WHERE module.kind = 'module' AND NOT f.is_test
ORDER BY i.module_id;
