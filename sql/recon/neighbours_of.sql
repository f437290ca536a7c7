-- neighbours_of: symbols one edge away (either direction, calls/inherits/tests).
SELECT e.dst_symbol_id AS neighbour_id, e.src_symbol_id AS via_id
FROM recon.edge e
WHERE e.src_symbol_id IN :symbol_ids AND e.dst_symbol_id IS NOT NULL
  AND e.kind IN ('calls', 'inherits', 'tests')
UNION
SELECT e.src_symbol_id AS neighbour_id, e.dst_symbol_id AS via_id
FROM recon.edge e
WHERE e.dst_symbol_id IN :symbol_ids
  AND e.kind IN ('calls', 'inherits', 'tests')
ORDER BY neighbour_id, via_id;
