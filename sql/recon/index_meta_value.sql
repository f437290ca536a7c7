-- index_meta_value: one recon_meta value (no row: not recorded).
SELECT m.value FROM recon.recon_meta m WHERE m.key = :key;
