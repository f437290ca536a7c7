-- replay_recall: per store run, arm and anchor class, how many of the anchors the agent's
-- next action took from earlier observations each arm's prompt kept (recall = kept /
-- anchors), pooled over every decision and, in the edit_ columns, over the decisions whose
-- action was an edit. Only anchors the harness's own prompt (the current arm) kept count:
-- one it had already lost is no arm's to lose, so current's recall is 1 by construction.
-- The decision's action is the recorded one, read from the current arm's row. The
-- tree_known_ columns count only the decisions whose rebuilt working tree is known to be
-- the recorded run's (replay_decision.tree_known): a file view read from a tree that went
-- its own way can show other lines than the agent saw.
WITH reference AS (
    SELECT o.run_id, o.instance_id, o.seq, o.anchor_no, a.anchor_class, d.action_kind,
           d.tree_known
    FROM replay_anchor_outcome o
    JOIN replay_anchor a ON a.run_id = o.run_id AND a.instance_id = o.instance_id
                        AND a.seq = o.seq AND a.anchor_no = o.anchor_no
    JOIN replay_decision d ON d.run_id = o.run_id AND d.instance_id = o.instance_id
                          AND d.seq = o.seq AND d.arm = o.arm
    WHERE o.arm = 'current' AND o.kept
),
outcome AS (
    SELECT o.run_id, o.arm, r.anchor_class,
           CASE WHEN o.kept THEN 1 ELSE 0 END AS kept,
           CASE WHEN r.action_kind = 'edit' THEN 1 ELSE 0 END AS at_edit,
           CASE WHEN r.tree_known THEN 1 ELSE 0 END AS on_known_tree
    FROM replay_anchor_outcome o
    JOIN reference r ON r.run_id = o.run_id AND r.instance_id = o.instance_id
                    AND r.seq = o.seq AND r.anchor_no = o.anchor_no
)
SELECT
    run_id, arm, anchor_class,
    COUNT(*) AS anchors,
    SUM(kept) AS kept,
    CAST(SUM(kept) AS DOUBLE PRECISION) / COUNT(*) AS recall,
    SUM(at_edit) AS edit_anchors,
    SUM(at_edit * kept) AS edit_kept,
    CAST(SUM(at_edit * kept) AS DOUBLE PRECISION) / NULLIF(SUM(at_edit), 0) AS edit_recall,
    SUM(on_known_tree) AS tree_known_anchors,
    SUM(on_known_tree * kept) AS tree_known_kept,
    CAST(SUM(on_known_tree * kept) AS DOUBLE PRECISION) / NULLIF(SUM(on_known_tree), 0) AS tree_known_recall
FROM outcome
GROUP BY run_id, arm, anchor_class
ORDER BY run_id, CASE arm WHEN 'current' THEN 1 WHEN 'mask10' THEN 2 ELSE 3 END, arm,
         anchor_class;
