-- index_set_file_stat: a file's stat key, read when its content was hashed.
INSERT INTO recon.file_stat (file_id, stat_key) VALUES (:file_id, :stat_key)
ON CONFLICT (file_id) DO UPDATE SET stat_key = excluded.stat_key;
