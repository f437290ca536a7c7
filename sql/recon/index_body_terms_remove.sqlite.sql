-- index_body_terms_remove: one symbol out of the contentless FTS5 body index, by giving the
-- very terms it was inserted with (PostgreSQL's rows go with their symbols).
INSERT INTO recon.symbol_body_fts(symbol_body_fts, rowid, terms)
VALUES ('delete', :symbol_id, :terms);
