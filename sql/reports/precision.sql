-- precision: relevance precision per A/B decision (§7.2), by items and by tokens.
SELECT decision_id, arm, variant, instance_id, decision_type, evidence_items, gold_items,
       precision_items, precision_tokens
FROM v_decision_precision
ORDER BY instance_id, decision_type, arm, variant, decision_id;  -- (one order on both backends)
