-- budget_steps: the eviction ladder steps of one decision, in order.
SELECT step_no, ladder_step, item_id, tokens_before, tokens_after, detail
FROM budget_log
WHERE decision_id = :decision_id
ORDER BY step_no;
