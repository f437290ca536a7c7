-- gate_decision: the gate rule's verdict on every item of one decision, in pool order
-- (the pipeline applies the 64-item cap to the whole admitted set, ranked items included).
SELECT item_id, item_no, gate_verdict, driver
FROM v_gate_rule
WHERE decision_id = :decision_id
ORDER BY item_no;
