-- index_delete_file_stat: a file's stat key, with its file's other rows.
DELETE FROM recon.file_stat WHERE file_id = :file_id;
