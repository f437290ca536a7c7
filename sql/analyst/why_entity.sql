-- why_entity: every stage's action on the pool items of one entity in a decision, item by
-- item in event order: "what became of PriceCalculator.taxable_amount in decision 2?"
-- asked by entity key, since item ids differ between decisions. :entity is the key
-- (path::Qualified.name); :decision_id left empty (or unbound) means the newest decision.
SELECT w.decision_id, w.item_id, w.event_no, w.stage, w.action, w.driver, w.is_final,
       w.tokens_before, w.tokens_after, w.detail,
       w.window_position, w.window_block, w.window_rendering
FROM v_why w
WHERE w.decision_id = COALESCE(CAST(NULLIF(:decision_id, '') AS INTEGER),
                               (SELECT MAX(decision_id) FROM decision))
  AND w.entity_key = :entity
ORDER BY CAST(SUBSTR(w.item_id, 2) AS INTEGER), w.event_no;
