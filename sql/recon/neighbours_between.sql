-- neighbours_between: recon edges (calls/inherits/tests, either direction) that join a
-- symbol of one set to a symbol of another; each row names both ends.
SELECT e.src_symbol_id AS left_id, e.dst_symbol_id AS right_id
FROM recon.edge e
WHERE e.src_symbol_id IN :left_ids AND e.dst_symbol_id IN :right_ids
  AND e.kind IN ('calls', 'inherits', 'tests')
UNION
SELECT e.dst_symbol_id AS left_id, e.src_symbol_id AS right_id
FROM recon.edge e
WHERE e.dst_symbol_id IN :left_ids AND e.src_symbol_id IN :right_ids
  AND e.kind IN ('calls', 'inherits', 'tests')
ORDER BY left_id, right_id;
