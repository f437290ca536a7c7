-- window_item_not_in_pool: window items that are not pool items of their decision
-- (missing, or cut by the 256-item pool cap).
SELECT w.decision_id, w.position, w.item_id
FROM window_item w
LEFT JOIN evidence_item e ON e.decision_id = w.decision_id AND e.item_id = w.item_id
WHERE e.item_id IS NULL OR NOT e.in_pool
ORDER BY w.decision_id, w.position;
