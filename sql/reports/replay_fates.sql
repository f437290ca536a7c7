-- replay_fates: per store run, arm and anchor class, where the anchors an arm lost went —
-- its fate, the final verdict on the newest observation that held it (masked, stale,
-- capped, cut, never_given) — counted among the anchors the current arm kept (as
-- replay_recall counts them), with the share of those anchors each fate took.
WITH reference AS (
    SELECT o.run_id, o.instance_id, o.seq, o.anchor_no, a.anchor_class
    FROM replay_anchor_outcome o
    JOIN replay_anchor a ON a.run_id = o.run_id AND a.instance_id = o.instance_id
                        AND a.seq = o.seq AND a.anchor_no = o.anchor_no
    WHERE o.arm = 'current' AND o.kept
),
outcome AS (
    SELECT o.run_id, o.arm, r.anchor_class, o.kept, o.fate,
           COUNT(*) OVER (PARTITION BY o.run_id, o.arm, r.anchor_class) AS anchors
    FROM replay_anchor_outcome o
    JOIN reference r ON r.run_id = o.run_id AND r.instance_id = o.instance_id
                    AND r.seq = o.seq AND r.anchor_no = o.anchor_no
)
SELECT
    run_id, arm, anchor_class, fate,
    COUNT(*) AS lost_anchors,
    CAST(COUNT(*) AS DOUBLE PRECISION) / MAX(anchors) AS share_of_anchors
FROM outcome
WHERE NOT kept
GROUP BY run_id, arm, anchor_class, fate
ORDER BY run_id, CASE arm WHEN 'current' THEN 1 WHEN 'mask10' THEN 2 ELSE 3 END, arm,
         anchor_class, lost_anchors DESC, fate;
