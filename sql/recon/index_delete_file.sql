-- index_delete_file: a file's row, once its other rows are gone.
DELETE FROM recon.file WHERE id = :file_id;
