-- arms: every honest metric per arm and variant, side by side (the A/B at a glance).
SELECT
    p.arm, p.variant,
    COUNT(*) AS decisions,
    AVG(p.precision_items) AS precision_items,
    AVG(p.precision_tokens) AS precision_tokens,
    AVG(r.gold_recall) AS gold_recall,
    AVG(1.0 * d.token_count) AS mean_tokens,
    MAX(d.token_count) AS max_tokens,
    AVG(CASE WHEN d.token_count <= d.token_ceiling THEN 1.0 ELSE 0.0 END) AS budget_adherence,
    o.resolve_rate, o.cost_per_instance, o.tokens_per_instance, o.tokens_per_solved
FROM v_decision_precision p
JOIN v_ab_decision d ON d.decision_id = p.decision_id
LEFT JOIN v_decision_recall r ON r.decision_id = p.decision_id
LEFT JOIN v_arm_outcome o ON o.arm = p.arm AND o.variant = p.variant
GROUP BY p.arm, p.variant, o.resolve_rate, o.cost_per_instance, o.tokens_per_instance,
         o.tokens_per_solved
ORDER BY p.arm DESC, p.variant;
