-- index_delete_meta: one recon_meta value, before it is written anew.
DELETE FROM recon.recon_meta WHERE key = :key;
