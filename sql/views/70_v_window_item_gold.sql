-- v_window_item_gold: every window item of an A/B decision, whether it is a gold fact of
-- its instance (needed, §7.2) and whether it is evidence (not the plan node or an
-- acceptance criterion, which every arm sends alike). v_window_gold adds where its tokens
-- sit; v_decision_precision sums it. (decision_id is the window's: a filter on it reaches
-- window_item.)
CREATE VIEW v_window_item_gold AS
SELECT
    w.decision_id, d.arm, d.variant, d.instance_id, d.decision_type,
    w.position, w.item_id, w.role, w.rendering, w.block,
    CASE WHEN w.edge_critical THEN 1 ELSE 0 END AS edge_critical,
    w.token_count, e.kind, e.entity_key,
    CASE WHEN e.kind IN ('plan_node', 'acceptance_criteria') THEN 0 ELSE 1 END AS is_evidence,
    CASE WHEN EXISTS (
        SELECT 1 FROM gold_fact g
        WHERE g.instance_id = d.instance_id AND g.entity_key = e.entity_key
    ) THEN 1 ELSE 0 END AS is_gold
FROM v_ab_decision d
JOIN window_item w ON w.decision_id = d.decision_id
JOIN evidence_item e ON e.decision_id = w.decision_id AND e.item_id = w.item_id;
