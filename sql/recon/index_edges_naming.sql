-- index_edges_naming: the edges whose written or typed name holds a part (between dots) that
-- matches the pattern ('%.name.%', LIKE-escaped with \), but for tests edges. On SQLite LIKE
-- ignores ASCII case: the caller drops the edges whose parts do not hold the name exactly.
SELECT e.id, e.kind, e.src_symbol_id, e.dst_symbol_id, e.dst_name, e.typed_name, e.line
FROM recon.edge e
WHERE e.kind <> 'tests'
  AND (('.' || e.dst_name || '.') LIKE :pattern ESCAPE '\'
       OR ('.' || e.typed_name || '.') LIKE :pattern ESCAPE '\');
