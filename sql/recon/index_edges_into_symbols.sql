-- index_edges_into_symbols: the edges that resolved into a range of symbol ids (one file's
-- symbols, about to be replaced), but for tests edges (they follow their calls edges).
SELECT e.id, e.kind, e.src_symbol_id, e.dst_symbol_id, e.dst_name, e.typed_name, e.line
FROM recon.edge e
WHERE e.dst_symbol_id BETWEEN :first_id AND :last_id
  AND e.kind <> 'tests';
