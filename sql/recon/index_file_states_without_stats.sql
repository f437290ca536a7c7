-- index_file_states_without_stats: index_file_states for an index written before file_stat
-- (every file is hashed once, then its stat key is kept).
SELECT f.path, f.id, f.sha256, f.module, NULL AS stat_key
FROM recon.file f;
