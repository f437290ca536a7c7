-- tests_reaching: test functions that call a symbol directly (recon tests edges).
SELECT DISTINCT src.key
FROM recon.edge e
JOIN recon.symbol src ON src.id = e.src_symbol_id
JOIN recon.symbol dst ON dst.id = e.dst_symbol_id
WHERE e.kind = 'tests' AND dst.key = :entity_key
ORDER BY src.key;
