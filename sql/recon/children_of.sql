-- children_of: the symbols defined directly inside a set of symbols (a class's methods,
-- a module's top-level definitions).
SELECT s.id, s.parent_id
FROM recon.symbol s
WHERE s.parent_id IN :symbol_ids
ORDER BY s.parent_id, s.id;
