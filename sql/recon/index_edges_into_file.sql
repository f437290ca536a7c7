-- index_edges_into_file: the edges that resolved into a file's symbols (about to be
-- replaced or removed), but for tests edges (they follow their calls edges).
SELECT e.id, e.kind, e.src_symbol_id, e.dst_symbol_id, e.dst_name, e.typed_name, e.line
FROM recon.edge e
WHERE e.dst_symbol_id IN (SELECT s.id FROM recon.symbol s WHERE s.file_id = :file_id)
  AND e.kind <> 'tests';
