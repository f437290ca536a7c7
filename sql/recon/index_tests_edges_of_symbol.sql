-- index_tests_edges_of_symbol: the tests edges out of one test function.
SELECT e.id, e.dst_symbol_id, e.dst_name
FROM recon.edge e
WHERE e.src_symbol_id = :src_id
  AND e.kind = 'tests';
