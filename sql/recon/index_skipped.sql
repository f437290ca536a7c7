-- index_skipped: what the index holds as skipped: files without symbols (too large, too
-- deep) and the paths the last walk passed over (sorted by the caller: collations differ).
SELECT f.path, f.skipped FROM recon.file f WHERE f.skipped IS NOT NULL
UNION ALL
SELECT p.path, p.reason FROM recon.skipped_path p;
