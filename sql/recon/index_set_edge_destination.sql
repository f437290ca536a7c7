-- index_set_edge_destination: an edge resolved again.
UPDATE recon.edge SET dst_symbol_id = :dst_id WHERE id = :edge_id;
