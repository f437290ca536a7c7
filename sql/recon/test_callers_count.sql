-- test_callers_count: how many test functions call each of a set of symbols directly
-- (tests edges) — the retriever's measure of how generic a callee is (symbols(), S).
SELECT e.dst_symbol_id AS symbol_id, COUNT(DISTINCT e.src_symbol_id) AS test_callers
FROM recon.edge e
WHERE e.kind = 'tests' AND e.dst_symbol_id IN :symbol_ids
GROUP BY e.dst_symbol_id
ORDER BY e.dst_symbol_id;
