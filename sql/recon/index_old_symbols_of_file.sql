-- index_old_symbols_of_file: the symbols a file held before it is re-indexed (id order), to
-- tell which names its change adds, removes or redefines.
SELECT s.id, s.parent_id, s.key, s.kind, s.name
FROM recon.symbol s
WHERE s.file_id = :file_id
ORDER BY s.id;
