-- symbols_by_key_list: symbol ids for entity keys (failing tests given as pytest ids).
SELECT s.id, s.key
FROM recon.symbol s
WHERE s.key IN :entity_keys
ORDER BY s.id;
