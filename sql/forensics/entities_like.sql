-- entities_like: the distinct entity keys of a decision's pool that name a given symbol
-- or file — a key ending in ::NAME or .NAME, or a path ending in /NAME (what `ctxdb why
-- --entity` suggests when the key it was given is not in the pool). The patterns come
-- escaped with '!' from Python.
SELECT DISTINCT entity_key
FROM evidence_item
WHERE decision_id = :decision_id
  AND (entity_key LIKE :symbol_pattern ESCAPE '!'
       OR entity_key LIKE :member_pattern ESCAPE '!'
       OR entity_key LIKE :file_pattern ESCAPE '!')
ORDER BY entity_key
LIMIT 10;
