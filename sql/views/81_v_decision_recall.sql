-- v_decision_recall: per A/B decision, the share of its instance's needed facts (edited
-- entities, changed tests, FAIL_TO_PASS tests) present in the window in a form that still
-- holds them: a verbatim item of that entity, or a verbatim item whose span holds it. The
-- plan obligation and acceptance criteria hold no code (the plan node names its target
-- entity): they hold no fact, as v_decision_precision counts no evidence in them.
CREATE VIEW v_decision_recall AS
SELECT
    facts.decision_id, facts.arm, facts.variant, facts.instance_id, facts.decision_type,
    COUNT(*) AS gold_facts,
    SUM(facts.held) AS held,
    CAST(SUM(facts.held) AS DOUBLE PRECISION) / COUNT(*) AS gold_recall
FROM (
    SELECT DISTINCT
        d.decision_id, d.arm, d.variant, d.instance_id, d.decision_type, g.entity_key,
        CASE WHEN EXISTS (
            SELECT 1 FROM window_item w
            JOIN evidence_item e ON e.decision_id = w.decision_id AND e.item_id = w.item_id
            WHERE w.decision_id = d.decision_id AND w.rendering = 'verbatim'
              AND e.kind NOT IN ('plan_node', 'acceptance_criteria')
              AND (e.entity_key = g.entity_key
                   OR (e.path = g.path AND e.start_line <= g.start_line
                       AND e.end_line >= g.end_line))
        ) THEN 1 ELSE 0 END AS held
    FROM v_ab_decision d
    JOIN gold_fact g ON g.instance_id = d.instance_id
) facts
GROUP BY facts.decision_id, facts.arm, facts.variant, facts.instance_id, facts.decision_type;
