-- index_clear_skipped_paths: what the last walk passed over, before this walk's is written.
DELETE FROM recon.skipped_path;
