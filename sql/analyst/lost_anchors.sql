-- lost_anchors: of a replay, what the agent's next action used that a window lost and the
-- harness's own history (current) kept, an anchor a row, with where to look next: the
-- output that held it (held_by_item, E4k-2 of step held_by_seq: `ctxdb why DECISION
-- ITEM`), how ctx08's window showed that output and by which rule, and how many of the
-- windows with one rule off kept it (the first of them by name: a rule that, off, keeps
-- it). The arm parameter names the window (ctx08, or a rule-off arm such as
-- ctx08-without-views), empty or unbound for ctx08; a rule-off arm's windows are counted,
-- not recorded, so decision_id is always ctx08's decision at that step. The run_id
-- parameter empty or unbound means every replay run.
-- A loop step k's parts are items E(4k-3) to E4k, its output E(4k-2) (loop.item_numbers).
WITH anchor AS (
    SELECT r.*, 'E' || CAST(4 * r.held_by_seq - 2 AS VARCHAR(16)) AS held_by_item
    FROM replay_anchor r
)
SELECT a.run_id, a.instance_id, a.seq, o.arm, d.decision_id, a.anchor_class, a.anchor_text,
       a.path, a.line, o.fate, a.held_by_seq, a.held_by_item,
       w.rendering AS held_by_rendering,
       (SELECT r.driver FROM item_event r
        WHERE r.decision_id = d.decision_id AND r.stage = 'render'
          AND r.item_id = a.held_by_item
        ORDER BY r.event_no DESC LIMIT 1) AS held_by_rule,
       (SELECT COUNT(*) FROM replay_anchor_outcome k
        WHERE k.run_id = a.run_id AND k.instance_id = a.instance_id AND k.seq = a.seq
          AND k.anchor_no = a.anchor_no AND k.arm LIKE 'ctx08-without-%' AND k.kept)
           AS rule_off_arms_keeping,
       (SELECT MIN(k.arm) FROM replay_anchor_outcome k
        WHERE k.run_id = a.run_id AND k.instance_id = a.instance_id AND k.seq = a.seq
          AND k.anchor_no = a.anchor_no AND k.arm LIKE 'ctx08-without-%' AND k.kept)
           AS first_rule_off_arm_keeping
FROM anchor a
JOIN replay_anchor_outcome o ON o.run_id = a.run_id AND o.instance_id = a.instance_id
                            AND o.seq = a.seq AND o.anchor_no = a.anchor_no
                            AND o.arm = COALESCE(NULLIF(:arm, ''), 'ctx08')
                            AND NOT o.kept
JOIN replay_anchor_outcome c ON c.run_id = a.run_id AND c.instance_id = a.instance_id
                            AND c.seq = a.seq AND c.anchor_no = a.anchor_no
                            AND c.arm = 'current' AND c.kept
JOIN replay_decision d ON d.run_id = a.run_id AND d.instance_id = a.instance_id
                      AND d.seq = a.seq AND d.arm = 'ctx08'
LEFT JOIN window_item w ON w.decision_id = d.decision_id AND w.item_id = a.held_by_item
WHERE NULLIF(:run_id, '') IS NULL OR a.run_id = :run_id
ORDER BY a.run_id, a.instance_id, a.seq, a.anchor_no;
