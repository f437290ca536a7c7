-- residue: the pool items the gate could not decide (residual: near the decision, linked
-- by nothing), which the one ranking call scores or the fold rule takes (§4), with what
-- made each near. :decision_id left empty (or unbound) means the newest decision.
-- (v_gate_rule, not v_gate: the 64-item cap turns only admitted items away, and a filter
-- on an expression does not reach through v_gate's ranking to a single decision)
SELECT g.decision_id, g.item_id, g.source, g.kind, g.entity_key, g.driver,
       n.near_score, n.recon_hops, n.shared_terms
FROM v_gate_rule g
LEFT JOIN item_nearness n ON n.decision_id = g.decision_id AND n.item_id = g.item_id
WHERE g.decision_id = COALESCE(CAST(NULLIF(:decision_id, '') AS INTEGER),
                               (SELECT MAX(decision_id) FROM decision))
  AND g.gate_verdict = 'residual'
ORDER BY g.item_no;
