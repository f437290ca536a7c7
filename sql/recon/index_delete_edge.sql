-- index_delete_edge: a tests edge whose call no longer resolves.
DELETE FROM recon.edge WHERE id = :edge_id;
