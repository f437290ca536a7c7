-- part_over_run: one part of an agent loop's window in every decision of its run, step by
-- step: how each window showed it (whole, cut, a view, a pointer; no row once the ladder
-- evicted it, but its verdict), the rule that gave it that form and why (the fold and
-- its horizon, a file out of play, the ceiling's ladder), its final verdict and tokens:
-- "when did the output that held the lost line fold, and by which rule?" A part's item
-- id is fixed for the run (step k's command E(4k-3), output E(4k-2), reasoning E(4k-1),
-- note of changed lines E4k), so the item_id parameter names the same part in each
-- decision; the run_id and instance_id parameters name the run (a replay's run id is
-- replay unless given).
SELECT d.seq, d.decision_id, r.action AS rendering, r.driver AS rule, r.detail AS why,
       f.action AS verdict, f.tokens_after AS tokens, w.position AS window_position
FROM decision d
JOIN item_event f ON f.decision_id = d.decision_id AND f.item_id = :item_id AND f.is_final
LEFT JOIN item_event r ON r.decision_id = d.decision_id AND r.item_id = :item_id
                      AND r.stage = 'render'
LEFT JOIN window_item w ON w.decision_id = d.decision_id AND w.item_id = :item_id
WHERE d.run_id = :run_id AND d.instance_id = :instance_id
ORDER BY d.seq, d.decision_id;
