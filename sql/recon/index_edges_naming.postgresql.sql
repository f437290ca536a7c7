-- index_edges_naming: the edges, but for tests edges, whose written or typed name holds the
-- name as a substring (the caller keeps those holding it as a part between dots).
SELECT e.id, e.kind, e.src_symbol_id, e.dst_symbol_id, e.dst_name, e.typed_name, e.line
FROM recon.edge e
WHERE e.kind <> 'tests'
  AND (strpos(e.dst_name, :name) > 0 OR strpos(e.typed_name, :name) > 0);
