-- index_edges_all: every edge but tests edges, for a change that touches too many names to
-- look each one up.
SELECT e.id, e.kind, e.src_symbol_id, e.dst_symbol_id, e.dst_name, e.typed_name, e.line
FROM recon.edge e
WHERE e.kind <> 'tests';
