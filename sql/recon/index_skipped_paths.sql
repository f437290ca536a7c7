-- index_skipped_paths: what the last walk passed over.
SELECT p.path, p.reason FROM recon.skipped_path p;
