-- edge_critical_in_middle: decision-critical window items placed in the middle span
-- (§3.6, invariant 6). The lost-in-the-middle probe's `litm_buried` variant buries them
-- on purpose and is exempt.
SELECT w.decision_id, w.position, w.item_id, w.role
FROM window_item w
JOIN decision d ON d.decision_id = w.decision_id
JOIN run r ON r.run_id = d.run_id
WHERE w.edge_critical AND w.block = 'middle' AND r.variant <> 'litm_buried'
ORDER BY w.decision_id, w.position;
