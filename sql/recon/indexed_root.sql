-- indexed_root: the directory the recon index was built from (its real path, written by
-- every index run that changes anything), so an absolute path a harness sends can be
-- made relative to it. No row for an index written before the root was recorded.
SELECT m.value AS root
FROM recon.recon_meta m
WHERE m.key = :root_key;
