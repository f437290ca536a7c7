-- gold_recall: per A/B decision, needed facts present in a form that holds them.
SELECT decision_id, arm, variant, instance_id, decision_type, gold_facts, held, gold_recall
FROM v_decision_recall
ORDER BY instance_id, decision_type, arm, variant, decision_id;  -- (one order on both backends)
