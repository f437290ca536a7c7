-- residue_fate: how the gate's residual items of one decision ended (rank stage).
SELECT ev.action, COUNT(*) AS items
FROM item_event ev
WHERE ev.decision_id = :decision_id AND ev.stage = 'rank'
  AND (ev.is_final OR ev.action IN ('admitted', 'folded_in'))
GROUP BY ev.action
ORDER BY ev.action;
