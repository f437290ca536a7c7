-- v_window_item: the windows with their texts — window_item joined to evidence_text, where
-- each distinct text is stored once by its sha256 (an agent loop's windows repeat most
-- of theirs). `rendered_text` is exactly the text the item added to its window.
CREATE VIEW v_window_item AS
SELECT
    w.decision_id,
    w.position,
    w.item_id,
    w.role,
    w.rendering,
    w.tier,
    w.block,
    w.edge_critical,
    w.token_count,
    t.content AS rendered_text,
    w.shown_start_line,
    w.shown_end_line,
    w.rendered_sha256
FROM window_item w
JOIN evidence_text t ON t.content_sha256 = w.rendered_sha256;
