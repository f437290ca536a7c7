-- index_symbol_names_remove: take a file's symbols out of the external-content FTS5 table
-- symbol_fts, by giving it the values they were indexed with (before the rows go).
INSERT INTO recon.symbol_fts(symbol_fts, rowid, name, qualname, signature, doc)
SELECT 'delete', s.id, s.name, s.qualname, s.signature, s.doc
FROM recon.symbol s
WHERE s.file_id = :file_id;
