-- rank_call_over_residue_cap: ranking calls that scored more candidates than the
-- §4 firing cap of 32 (RESIDUE_MAX) allows.
SELECT c.rank_call_id, c.decision_id, COUNT(s.item_id) AS scored_items
FROM rank_call c
JOIN rank_score s ON s.rank_call_id = c.rank_call_id
GROUP BY c.rank_call_id, c.decision_id
HAVING COUNT(s.item_id) > 32
ORDER BY c.rank_call_id;
