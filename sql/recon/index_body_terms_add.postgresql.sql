-- index_body_terms_add: one symbol's body terms, a tsvector literal (tsvector_literal).
INSERT INTO recon.symbol_body(symbol_id, terms) VALUES (:symbol_id, CAST(:terms AS tsvector));
