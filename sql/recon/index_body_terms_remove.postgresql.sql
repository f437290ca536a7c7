-- index_body_terms_remove: one symbol's body terms, before they are written again (its
-- row goes with the symbol otherwise: ON DELETE CASCADE).
DELETE FROM recon.symbol_body WHERE symbol_id = :symbol_id;
