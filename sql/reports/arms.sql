-- arms: every honest metric per arm and variant, side by side (the A/B at a glance).
-- Every decision counts, an empty window too (a run's first step: the harness prompt
-- alone); precision and recall only where the instance has gold facts.
SELECT
    d.arm, d.variant,
    COUNT(*) AS decisions,
    AVG(p.precision_items) AS precision_items,
    AVG(p.precision_tokens) AS precision_tokens,
    AVG(r.gold_recall) AS gold_recall,
    AVG(CAST(d.token_count AS DOUBLE PRECISION)) AS mean_tokens,
    MAX(d.token_count) AS max_tokens,
    AVG(CAST(CASE WHEN d.token_count <= d.token_ceiling THEN 1 ELSE 0 END AS DOUBLE PRECISION)) AS budget_adherence,
    o.resolve_rate, o.cost_per_instance, o.tokens_per_instance, o.tokens_per_solved
FROM v_ab_decision d
LEFT JOIN v_decision_precision p ON p.decision_id = d.decision_id
LEFT JOIN v_decision_recall r ON r.decision_id = d.decision_id
LEFT JOIN v_arm_outcome o ON o.arm = d.arm AND o.variant = d.variant
GROUP BY d.arm, d.variant, o.resolve_rate, o.cost_per_instance, o.tokens_per_instance,
         o.tokens_per_solved
ORDER BY d.arm DESC, d.variant;
