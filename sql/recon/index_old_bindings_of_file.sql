-- index_old_bindings_of_file: the names a file bound by import before it is re-indexed.
SELECT b.name, b.target
FROM recon.binding b
WHERE b.file_id = :file_id;
