-- index_edges_by_id: every edge, tests edges too, in id order (to resolve all of them again).
SELECT e.id, e.kind, e.src_symbol_id, e.dst_symbol_id, e.dst_name, e.typed_name, e.line
FROM recon.edge e
ORDER BY e.id;
