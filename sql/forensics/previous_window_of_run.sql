-- previous_window_of_run: what the newest earlier decision of one instance of a run
-- showed, part by part (an agent-loop window keeps the parts it folded as that window
-- showed them until its fold horizon moves: adapter.construct_step reads them here).
-- newest_item_no: the highest item number that decision held (its history's length).
SELECT e.item_no, e.content_sha256, w.rendering, w.rendered_text,
       (SELECT MAX(every_item.item_no) FROM evidence_item every_item
        WHERE every_item.decision_id = w.decision_id) AS newest_item_no
FROM window_item w
JOIN evidence_item e ON e.decision_id = w.decision_id AND e.item_id = w.item_id
WHERE w.decision_id = (
    SELECT d.decision_id FROM decision d
    WHERE d.run_id = :run_id AND d.instance_id = :instance_id AND d.seq < :seq
    ORDER BY d.seq DESC, d.decision_id DESC
    LIMIT 1)
ORDER BY w.position;
