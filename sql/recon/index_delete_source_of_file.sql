-- index_delete_source_of_file: a file's text, with its other rows.
DELETE FROM recon.file_source WHERE file_id = :file_id;
