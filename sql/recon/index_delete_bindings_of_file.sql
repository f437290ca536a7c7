-- index_delete_bindings_of_file: the names a file binds by import, with its other rows.
DELETE FROM recon.binding WHERE file_id = :file_id;
