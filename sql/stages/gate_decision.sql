-- gate_decision: the gate's verdict on every item of one decision, in pool order.
SELECT item_id, item_no, gate_verdict, driver, admit_rank
FROM v_gate
WHERE decision_id = :decision_id
ORDER BY item_no;
