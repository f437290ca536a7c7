-- gate_decision: the gate rule's verdict on every item of one decision, in pool order,
-- with its source priority (the pipeline applies the 64-item cap to the whole admitted
-- set, ranked items included, in v_gate's order).
SELECT item_id, item_no, gate_verdict, driver, priority
FROM v_gate_rule
WHERE decision_id = :decision_id
ORDER BY item_no;
