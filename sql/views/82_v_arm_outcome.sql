-- v_arm_outcome: the end-to-end figures per arm and variant (§7.1, §7.3) from recorded
-- outcomes: resolve rate, cost and context tokens per instance, and tokens per solved
-- instance (context tokens sent over all instances ÷ instances solved; lower is better).
CREATE VIEW v_arm_outcome AS
SELECT
    t.arm, t.variant,
    COUNT(*) AS instances,
    SUM(CASE WHEN o.solved THEN 1 ELSE 0 END) AS solved,
    CAST(SUM(CASE WHEN o.solved THEN 1 ELSE 0 END) AS DOUBLE PRECISION) / COUNT(*) AS resolve_rate,
    AVG(o.cost_usd) AS cost_per_instance,
    AVG(CAST(t.context_tokens AS DOUBLE PRECISION)) AS tokens_per_instance,
    CAST(SUM(t.context_tokens) AS DOUBLE PRECISION)
        / NULLIF(SUM(CASE WHEN o.solved THEN 1 ELSE 0 END), 0) AS tokens_per_solved
FROM (
    SELECT run_id, arm, variant, instance_id, SUM(token_count) AS context_tokens
    FROM v_ab_decision
    GROUP BY run_id, arm, variant, instance_id
) t
JOIN outcome o ON o.run_id = t.run_id AND o.instance_id = t.instance_id
GROUP BY t.arm, t.variant;
