-- v_why: an item's whole path through the stages of one decision — every event in order,
-- with the item's identity and, if it reached the window, where and how it sits there.
-- Query: SELECT * FROM v_why WHERE decision_id = 42 AND item_id = 'E7' ORDER BY event_no;
CREATE VIEW v_why AS
SELECT
    ev.decision_id,
    ev.item_id,
    ev.event_no,
    ev.stage,
    ev.action,
    ev.driver,
    ev.tokens_before,
    ev.tokens_after,
    ev.is_final,
    ev.detail,
    e.source,
    e.kind,
    e.entity_key,
    e.provenance,
    w.position AS window_position,
    w.block AS window_block,
    w.rendering AS window_rendering
FROM item_event ev
JOIN evidence_item e ON e.decision_id = ev.decision_id AND e.item_id = ev.item_id
LEFT JOIN window_item w ON w.decision_id = ev.decision_id AND w.item_id = ev.item_id;
