-- index_old_symbols_of_file: the symbols a file held before it is re-indexed (id order): to
-- tell which names its change adds, removes or redefines, and which rows it leaves as
-- they were (a symbol whose key stays keeps its id).
SELECT s.id, s.parent_id, s.key, s.kind, s.name, s.qualname, s.start_line, s.end_line,
       s.start_byte, s.end_byte, s.signature, s.doc
FROM recon.symbol s
WHERE s.file_id = :file_id
ORDER BY s.id;
