-- loop_cost: per arm and variant of the store's agent-loop runs (a live A/B: the same
-- instances run once with CTX=ctx08 and once with CTX=current; a run is a loop's when
-- its requests name their steps, and a replay's own record of its windows is left out),
-- the instances and decisions, the tokens sent, the share a prompt cache would serve
-- (v_decision_cached: each decision after the one before it in its run and instance),
-- and the cost in token units with a cache read priced at the bound parameter
-- cached_price_ratio times an input token: sum(tokens - cached) + ratio * sum(cached);
-- then per solved instance (every instance's cost over the instances solved, from
-- outcome; an instance with no outcome recorded counts as unsolved), and the cost as a
-- share of the current arm's of the same variant (their totals: run both arms on the
-- same instances). The *_at_marks columns price a cache that serves only where an
-- earlier request marked (Anthropic's; v_decision_cached.cached_at_marks_tokens: the
-- marks the mini-swe-agent wrapper puts on a ctx08 window, and an append-only history
-- served whole), as if every window had gone marked: the wrapper marks only for a model
-- that marks its own prompts, or when asked; cache_marked_decisions counts the decisions
-- whose windows did (flag cache_marked). A cache write's premium and the cache's lifetime
-- are not counted.
WITH loop_run AS (
    SELECT r.run_id, r.arm, r.variant
    FROM run r
    WHERE EXISTS (SELECT 1 FROM decision d
                  WHERE d.run_id = r.run_id
                    AND (d.request_json LIKE '%"steps_sha256": [%'
                         OR d.request_json LIKE '%"steps": [%'))
      AND NOT EXISTS (SELECT 1 FROM replay_run p WHERE p.run_id = r.run_id)
),
per_instance AS (  -- one instance of one run
    SELECT l.arm, l.variant, c.run_id, c.instance_id,
           COUNT(*) AS decisions,
           SUM(c.token_count) AS tokens,
           SUM(c.cached_tokens) AS cached_tokens,
           SUM(c.cached_at_marks_tokens) AS cached_at_marks_tokens,
           SUM(c.cache_marked) AS cache_marked_decisions,
           MAX(CASE WHEN o.solved THEN 1 ELSE 0 END) AS solved,
           MAX(CASE WHEN o.run_id IS NULL THEN 0 ELSE 1 END) AS with_outcome
    FROM v_decision_cached c
    JOIN loop_run l ON l.run_id = c.run_id
    LEFT JOIN outcome o ON o.run_id = c.run_id AND o.instance_id = c.instance_id
    WHERE c.token_count IS NOT NULL
    GROUP BY l.arm, l.variant, c.run_id, c.instance_id
),
arm_total AS (
    SELECT arm, variant,
           COUNT(*) AS instances,
           CAST(SUM(decisions) AS BIGINT) AS decisions,
           CAST(SUM(tokens) AS BIGINT) AS tokens,
           CAST(SUM(cached_tokens) AS BIGINT) AS cached_tokens,
           SUM(tokens - cached_tokens) + :cached_price_ratio * SUM(cached_tokens)
               AS cost_tokens,
           CAST(SUM(cache_marked_decisions) AS BIGINT) AS cache_marked_decisions,
           CAST(SUM(cached_at_marks_tokens) AS BIGINT) AS cached_at_marks_tokens,
           SUM(tokens - cached_at_marks_tokens)
               + :cached_price_ratio * SUM(cached_at_marks_tokens) AS cost_at_marks_tokens,
           CAST(SUM(with_outcome) AS BIGINT) AS instances_with_outcome,
           CAST(SUM(solved) AS BIGINT) AS solved
    FROM per_instance
    GROUP BY arm, variant
)
SELECT t.arm, t.variant, t.instances, t.decisions, t.tokens, t.cached_tokens,
       1.0 * t.cached_tokens / NULLIF(t.tokens, 0) AS cached_share,
       t.cost_tokens, t.instances_with_outcome, t.solved,
       1.0 * t.tokens / NULLIF(t.solved, 0) AS tokens_per_solved,
       1.0 * t.cost_tokens / NULLIF(t.solved, 0) AS cost_per_solved,
       1.0 * t.cost_tokens / NULLIF(c.cost_tokens, 0) AS cost_of_current,
       t.cache_marked_decisions,
       t.cached_at_marks_tokens,
       1.0 * t.cached_at_marks_tokens / NULLIF(t.tokens, 0) AS cached_at_marks_share,
       t.cost_at_marks_tokens,
       1.0 * t.cost_at_marks_tokens / NULLIF(t.solved, 0) AS cost_at_marks_per_solved,
       1.0 * t.cost_at_marks_tokens / NULLIF(c.cost_at_marks_tokens, 0)
           AS cost_at_marks_of_current
FROM arm_total t
LEFT JOIN arm_total c ON c.arm = 'current' AND c.variant = t.variant
ORDER BY CASE t.arm WHEN 'current' THEN 1 ELSE 2 END, t.arm, t.variant;
