-- index_delete_edges_of_file: the edges out of a file's symbols, with the file's other rows.
DELETE FROM recon.edge
WHERE src_symbol_id IN (SELECT s.id FROM recon.symbol s WHERE s.file_id = :file_id);
