-- index_delete_file_stat: a file's stat key forgotten (it was read too close to its last change).
DELETE FROM recon.file_stat WHERE file_id = :file_id;
