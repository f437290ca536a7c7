-- residue_of_decision: the gate's residual items of one decision with why each is near
-- and the obligation bucket (decision_link) it is nearest to — what §4 ranks or folds.
SELECT g.item_id, g.item_no, g.kind, n.recon_hops, n.shared_terms, n.nearest_link_no,
       l.link_kind AS nearest_link_kind, l.entity_key AS nearest_entity
FROM v_gate_rule g
JOIN item_nearness n ON n.decision_id = g.decision_id AND n.item_id = g.item_id
LEFT JOIN decision_link l ON l.decision_id = n.decision_id AND l.link_no = n.nearest_link_no
WHERE g.decision_id = :decision_id AND g.gate_verdict = 'residual'
ORDER BY g.item_no;
