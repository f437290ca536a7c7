-- index_delete_symbols_of_file: a file's symbols, with its other rows.
DELETE FROM recon.symbol WHERE file_id = :file_id;
