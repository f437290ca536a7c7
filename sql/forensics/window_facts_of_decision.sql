-- window_facts_of_decision: each window item's fact identity with its pool text and hash
-- (what names a live item readably across decisions, for diff; each text is <= 8 KB), and
-- the text the window showed (a loop's view, read again from the tree, shows other lines
-- of the same output; NULL in a store from before revision 0011).
SELECT w.item_id, w.rendering, e.fact_key, e.kind, e.entity_key, e.provenance,
       e.content_sha256, t.content, shown.content AS rendered_text
FROM window_item w
JOIN evidence_item e ON e.decision_id = w.decision_id AND e.item_id = w.item_id
JOIN evidence_text t ON t.content_sha256 = e.content_sha256
LEFT JOIN evidence_text shown ON shown.content_sha256 = w.rendered_sha256
WHERE w.decision_id = :decision_id
ORDER BY w.position;
