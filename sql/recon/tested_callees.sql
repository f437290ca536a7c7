-- tested_callees: symbols a test calls directly (recon's tests edges), test by entity key.
SELECT DISTINCT dst.id, dst.key, f.path, dst.start_line, dst.end_line
FROM recon.edge e
JOIN recon.symbol src ON src.id = e.src_symbol_id
JOIN recon.symbol dst ON dst.id = e.dst_symbol_id
JOIN recon.file f ON f.id = dst.file_id
WHERE e.kind = 'tests' AND src.key = :test_key
ORDER BY dst.key;
