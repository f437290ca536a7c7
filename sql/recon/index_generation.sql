-- index_generation: the index's snapshot generation (no row: an index that predates them).
SELECT m.value FROM recon.recon_meta m WHERE m.key = :generation_key;
