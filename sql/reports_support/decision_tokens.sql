-- decision_tokens: tokens sent per A/B decision.
SELECT decision_id, token_count FROM v_ab_decision ORDER BY decision_id;
