-- loop_cost: per arm and variant of the store's runs (a live A/B of an agent loop: the
-- same instances run once with CTX=ctx08 and once with CTX=current), the decisions, the
-- tokens sent, the share a prompt cache would serve (v_decision_cached: each decision
-- after the one before it in its run and instance), and the cost in token units with a
-- cache read priced at the bound parameter cached_price_ratio times an input token:
-- sum(tokens - cached) + ratio * sum(cached); then per solved instance (every instance's
-- cost over the instances solved, from outcome; an instance with no outcome recorded
-- counts as unsolved), and the cost as a share of the current arm's of the same variant.
WITH arm_total AS (
    SELECT r.arm, r.variant,
           COUNT(DISTINCT c.run_id || ':' || c.instance_id) AS instances,
           COUNT(*) AS decisions,
           CAST(SUM(c.token_count) AS BIGINT) AS tokens,
           CAST(SUM(c.cached_tokens) AS BIGINT) AS cached_tokens,
           SUM(c.token_count - c.cached_tokens)
               + :cached_price_ratio * SUM(c.cached_tokens) AS cost_tokens
    FROM v_decision_cached c
    JOIN run r ON r.run_id = c.run_id
    WHERE c.token_count IS NOT NULL
    GROUP BY r.arm, r.variant
),
arm_solved AS (
    SELECT r.arm, r.variant,
           COUNT(*) AS instances_with_outcome,
           SUM(CASE WHEN o.solved THEN 1 ELSE 0 END) AS solved
    FROM outcome o
    JOIN run r ON r.run_id = o.run_id
    WHERE EXISTS (SELECT 1 FROM decision d
                  WHERE d.run_id = o.run_id AND d.instance_id = o.instance_id)
    GROUP BY r.arm, r.variant
)
SELECT t.arm, t.variant, t.instances, t.decisions, t.tokens, t.cached_tokens,
       1.0 * t.cached_tokens / NULLIF(t.tokens, 0) AS cached_share,
       t.cost_tokens,
       COALESCE(s.instances_with_outcome, 0) AS instances_with_outcome,
       COALESCE(s.solved, 0) AS solved,
       1.0 * t.tokens / NULLIF(s.solved, 0) AS tokens_per_solved,
       1.0 * t.cost_tokens / NULLIF(s.solved, 0) AS cost_per_solved,
       1.0 * t.cost_tokens / NULLIF(c.cost_tokens, 0) AS cost_of_current
FROM arm_total t
LEFT JOIN arm_solved s ON s.arm = t.arm AND s.variant = t.variant
LEFT JOIN arm_total c ON c.arm = 'current' AND c.variant = t.variant
ORDER BY CASE t.arm WHEN 'current' THEN 1 ELSE 2 END, t.arm, t.variant;
