-- index_symbol_name_add: one symbol's names into the external-content FTS5 table symbol_fts
-- (PostgreSQL's column is generated).
INSERT INTO recon.symbol_fts(rowid, name, qualname, signature, doc)
VALUES (:id, :name, :qualname, :signature, :doc);
