-- previous_window_of_run: the newest earlier decision of one instance of a run, item by
-- item: every item's content digest (the history that window came after), and for the
-- items it showed folded (a view or a pointer) their text, with the content of the notes
-- of changed lines (the item numbers of a step's fourth part). An agent-loop
-- window keeps its folded parts as that window showed them until its fold horizon moves
-- (adapter.settled_parts); the decision's flags say when its fold waited (fold_waited:N);
-- ladder_folded, whether the ceiling's ladder folded the item (a budget_log step of the
-- fold_fresh or fold_view parameter's name), which stays folded while the next window is
-- over the ceiling too.
WITH previous AS (
    SELECT d.decision_id, d.flags FROM decision d
    WHERE d.run_id = :run_id AND d.instance_id = :instance_id AND d.seq < :seq
    ORDER BY d.seq DESC, d.decision_id DESC
    LIMIT 1)
SELECT e.item_no, e.content_sha256, w.rendering, p.flags,
       CASE WHEN w.rendering IN (:view, :pointer) THEN shown.content END AS rendered_text,
       note.content AS note_content,
       EXISTS (SELECT 1 FROM budget_log b
               WHERE b.decision_id = p.decision_id AND b.item_id = e.item_id
                 AND b.ladder_step IN (:fold_fresh, :fold_view)) AS ladder_folded
FROM previous p
JOIN evidence_item e ON e.decision_id = p.decision_id
LEFT JOIN window_item w ON w.decision_id = e.decision_id AND w.item_id = e.item_id
LEFT JOIN evidence_text shown ON shown.content_sha256 = w.rendered_sha256
    AND w.rendering IN (:view, :pointer)
LEFT JOIN evidence_text note ON note.content_sha256 = e.content_sha256
    AND e.item_no % :parts_per_step = :note_part
ORDER BY e.item_no;
