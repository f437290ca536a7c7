-- index_body_terms_add: one symbol's body terms into the contentless FTS5 body index.
INSERT INTO recon.symbol_body_fts(rowid, terms) VALUES (:symbol_id, :terms);
