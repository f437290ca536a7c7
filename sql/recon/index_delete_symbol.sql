-- index_delete_symbol: a symbol a re-parsed file no longer defines.
DELETE FROM recon.symbol WHERE id = :symbol_id;
