-- index_meta: every recon_meta entry (versions, generation, root), as schema.read_meta reads
-- them, for the indexer's own read through the driver.
SELECT m.key, m.value FROM recon.recon_meta m;
