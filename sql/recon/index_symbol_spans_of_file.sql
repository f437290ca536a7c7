-- index_symbol_spans_of_file: a file's symbols as body_terms reads them (id order).
SELECT s.id, s.parent_id, s.key, s.kind, s.name, s.qualname, s.start_line, s.end_line,
       s.start_byte, s.end_byte
FROM recon.symbol s
WHERE s.file_id = :file_id
ORDER BY s.id;
