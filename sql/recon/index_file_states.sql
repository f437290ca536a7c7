-- index_file_states: what change detection compares a walk with: each indexed file's id, content
-- hash, module name and its stat key when last read (NULL: hash it to be sure).
SELECT f.path, f.id, f.sha256, f.module, s.stat_key
FROM recon.file f
LEFT JOIN recon.file_stat s ON s.file_id = f.id;
