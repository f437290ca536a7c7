-- window_of_decision: the window as sent, in order, with each item's fact identity.
SELECT w.position, w.item_id, w.role, w.rendering, w.tier, w.block, w.edge_critical,
       w.token_count, t.content AS rendered_text, w.shown_start_line, w.shown_end_line,
       e.fact_key, e.kind, e.entity_key
FROM window_item w
JOIN evidence_text t ON t.content_sha256 = w.rendered_sha256
JOIN evidence_item e ON e.decision_id = w.decision_id AND e.item_id = w.item_id
WHERE w.decision_id = :decision_id
ORDER BY w.position;
