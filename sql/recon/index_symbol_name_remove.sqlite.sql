-- index_symbol_name_remove: one symbol out of the external-content FTS5 table symbol_fts,
-- by giving it the values it was indexed with.
INSERT INTO recon.symbol_fts(symbol_fts, rowid, name, qualname, signature, doc)
VALUES ('delete', :id, :name, :qualname, :signature, :doc);
