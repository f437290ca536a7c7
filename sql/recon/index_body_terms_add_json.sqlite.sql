-- index_body_terms_add_json: a cold build's body terms in bulk: a JSON array of the terms
-- of consecutive symbols, from the first symbol id on (one statement runs without the
-- GIL; an executemany takes it back at every row).
INSERT INTO recon.symbol_body_fts(rowid, terms)
SELECT :first_symbol + j.key, j.value FROM json_each(:terms) j;
