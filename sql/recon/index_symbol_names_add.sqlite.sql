-- index_symbol_names_add: index the names of the symbols just inserted (ids first_id..last_id)
-- in the external-content FTS5 table symbol_fts (PostgreSQL's column is generated).
INSERT INTO recon.symbol_fts(rowid, name, qualname, signature, doc)
SELECT s.id, s.name, s.qualname, s.signature, s.doc
FROM recon.symbol s
WHERE s.id BETWEEN :first_id AND :last_id;
