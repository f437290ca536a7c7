-- item_of_entity: the pool items of one entity in a decision — its evidence first (the
-- plan node and its criteria name the target too), then in pool order (what
-- `ctxdb why DECISION ENTITY` and store.why(decision, entity) start from).
SELECT item_id
FROM evidence_item
WHERE decision_id = :decision_id AND entity_key = :entity_key
ORDER BY CASE WHEN kind IN ('plan_node', 'acceptance_criteria') THEN 1 ELSE 0 END, item_no;
