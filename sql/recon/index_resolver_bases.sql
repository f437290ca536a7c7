-- index_resolver_bases: every base class as written (inherits edges), in edge id order.
SELECT e.src_symbol_id, e.dst_name, e.typed_name
FROM recon.edge e
WHERE e.kind = 'inherits'
ORDER BY e.id;
