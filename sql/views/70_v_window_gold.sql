-- v_window_gold: every window item of an A/B decision, whether it is a gold fact of its
-- instance (needed, §7.2), whether it is evidence (not the plan node or an acceptance
-- criterion, which every arm sends alike), and where its tokens sit in the window.
CREATE VIEW v_window_gold AS
SELECT
    d.decision_id, d.arm, d.variant, d.instance_id, d.decision_type,
    w.position, w.item_id, w.role, w.rendering, w.block,
    CASE WHEN w.edge_critical THEN 1 ELSE 0 END AS edge_critical,
    w.token_count, e.kind, e.entity_key,
    CASE WHEN e.kind IN ('plan_node', 'acceptance_criteria') THEN 0 ELSE 1 END AS is_evidence,
    CASE WHEN EXISTS (
        SELECT 1 FROM gold_fact g
        WHERE g.instance_id = d.instance_id AND g.entity_key = e.entity_key
    ) THEN 1 ELSE 0 END AS is_gold,
    SUM(w.token_count) OVER (PARTITION BY w.decision_id ORDER BY w.position)
        - w.token_count AS tokens_before,
    SUM(w.token_count) OVER (PARTITION BY w.decision_id) AS window_tokens
FROM v_ab_decision d
JOIN window_item w ON w.decision_id = d.decision_id
JOIN evidence_item e ON e.decision_id = w.decision_id AND e.item_id = w.item_id;
