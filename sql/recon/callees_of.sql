-- callees_of: what a set of symbols calls (calls edges, and the tests edges a test's
-- resolved calls give), resolved destinations only.
SELECT DISTINCT e.src_symbol_id AS caller_id, e.dst_symbol_id AS callee_id
FROM recon.edge e
WHERE e.src_symbol_id IN :symbol_ids AND e.dst_symbol_id IS NOT NULL
  AND e.kind IN ('calls', 'tests')
ORDER BY caller_id, callee_id;
