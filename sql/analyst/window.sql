-- window: a decision's window in the order it was sent — each item's role, rendering,
-- tier, block and tokens, and the entity it shows. :decision_id left empty (or unbound)
-- means the newest decision.
SELECT w.decision_id, w.position, w.item_id, e.entity_key, e.kind, w.role, w.rendering,
       w.tier, w.block, w.edge_critical, w.token_count
FROM window_item w
JOIN evidence_item e ON e.decision_id = w.decision_id AND e.item_id = w.item_id
WHERE w.decision_id = COALESCE(CAST(NULLIF(:decision_id, '') AS INTEGER),
                               (SELECT MAX(decision_id) FROM decision))
ORDER BY w.position;
