-- index_file_text: a file's stored text (to compute its symbols' body terms again).
SELECT t.text FROM recon.file_source t WHERE t.file_id = :file_id;
