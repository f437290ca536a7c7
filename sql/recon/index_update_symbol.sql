-- index_update_symbol: a symbol a re-parsed file still defines (same key, same id), as it
-- is now (its lines, spans, signature ... moved).
UPDATE recon.symbol
SET parent_id = :parent_id, kind = :kind, name = :name, qualname = :qualname,
    start_line = :start_line, end_line = :end_line, start_byte = :start_byte,
    end_byte = :end_byte, signature = :signature, doc = :doc
WHERE id = :id;
