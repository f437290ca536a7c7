-- loop_cost: per arm and variant of the store's agent-loop runs (a live A/B: the same
-- instances run once with CTX=ctx08 and once with CTX=current; a run is a loop's when
-- its requests name their steps, and a replay's own record of its windows is left out),
-- the instances, the runs of them (instance_runs: a run and an instance) and the
-- decisions, the tokens sent, the share a prompt cache would serve (v_decision_cached:
-- each decision after the one before it in its run and instance), and the cost in token
-- units with a cache read priced at the bound parameter cached_price_ratio times an
-- input token: sum(tokens - cached) + ratio * sum(cached); then per solved instance
-- (every run's cost over the instances an outcome says a run of them solved; an
-- instance with no outcome recorded counts as unsolved). cost_of_current compares the
-- arm with the current arm of the same variant on the instances both ran
-- (paired_instances), each instance by the mean cost of its runs with an outcome (of all
-- its runs when none has one), so a run of one arm alone, or a run left unfinished and
-- run again, does not tilt it; the totals count every run. The *_at_marks columns price
-- a cache that serves only where an earlier request marked (Anthropic's;
-- v_decision_cached.cached_at_marks_tokens: the marks the mini-swe-agent wrapper puts on
-- a ctx08 window, and an append-only history served whole), as if every window had gone
-- marked: the wrapper marks only for a model that marks its own prompts, or when asked;
-- cache_marked_decisions counts the decisions whose windows did (flag cache_marked). A
-- cache write's premium and the cache's lifetime are not counted.
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
           SUM(c.token_count - c.cached_tokens)
               + :cached_price_ratio * SUM(c.cached_tokens) AS cost_tokens,
           SUM(c.token_count - c.cached_at_marks_tokens)
               + :cached_price_ratio * SUM(c.cached_at_marks_tokens) AS cost_at_marks_tokens,
           MAX(CASE WHEN o.solved THEN 1 ELSE 0 END) AS solved,
           MAX(CASE WHEN o.run_id IS NULL THEN 0 ELSE 1 END) AS with_outcome
    FROM v_decision_cached c
    JOIN loop_run l ON l.run_id = c.run_id
    LEFT JOIN outcome o ON o.run_id = c.run_id AND o.instance_id = c.instance_id
    WHERE c.token_count IS NOT NULL
    GROUP BY l.arm, l.variant, c.run_id, c.instance_id
),
instance_mean AS (  -- one instance in one arm: solved by any run; its graded runs' mean
    SELECT arm, variant, instance_id,    -- cost (all its runs' when none was graded)
           MAX(with_outcome) AS with_outcome, MAX(solved) AS solved,
           COALESCE(AVG(CASE WHEN with_outcome = 1 THEN cost_tokens END),
                    AVG(cost_tokens)) AS cost_tokens,
           COALESCE(AVG(CASE WHEN with_outcome = 1 THEN cost_at_marks_tokens END),
                    AVG(cost_at_marks_tokens)) AS cost_at_marks_tokens
    FROM per_instance
    GROUP BY arm, variant, instance_id
),
paired AS (  -- each instance both the arm and the current arm of its variant ran
    SELECT a.arm, a.variant,
           COUNT(*) AS paired_instances,
           SUM(a.cost_tokens) AS cost_tokens, SUM(c.cost_tokens) AS current_cost_tokens,
           SUM(a.cost_at_marks_tokens) AS cost_at_marks_tokens,
           SUM(c.cost_at_marks_tokens) AS current_cost_at_marks_tokens
    FROM instance_mean a
    JOIN instance_mean c ON c.arm = 'current' AND c.variant = a.variant
                        AND c.instance_id = a.instance_id
    GROUP BY a.arm, a.variant
),
arm_instances AS (
    SELECT arm, variant,
           COUNT(*) AS instances,
           CAST(SUM(with_outcome) AS BIGINT) AS instances_with_outcome,
           CAST(SUM(solved) AS BIGINT) AS solved
    FROM instance_mean
    GROUP BY arm, variant
),
arm_total AS (
    SELECT arm, variant,
           COUNT(*) AS instance_runs,
           CAST(SUM(decisions) AS BIGINT) AS decisions,
           CAST(SUM(tokens) AS BIGINT) AS tokens,
           CAST(SUM(cached_tokens) AS BIGINT) AS cached_tokens,
           SUM(cost_tokens) AS cost_tokens,
           CAST(SUM(cache_marked_decisions) AS BIGINT) AS cache_marked_decisions,
           CAST(SUM(cached_at_marks_tokens) AS BIGINT) AS cached_at_marks_tokens,
           SUM(cost_at_marks_tokens) AS cost_at_marks_tokens
    FROM per_instance
    GROUP BY arm, variant
)
SELECT t.arm, t.variant, i.instances, t.instance_runs, t.decisions, t.tokens, t.cached_tokens,
       CAST(t.cached_tokens AS DOUBLE PRECISION) / NULLIF(t.tokens, 0) AS cached_share,
       t.cost_tokens, i.instances_with_outcome, i.solved,
       CAST(t.tokens AS DOUBLE PRECISION) / NULLIF(i.solved, 0) AS tokens_per_solved,
       CAST(t.cost_tokens AS DOUBLE PRECISION) / NULLIF(i.solved, 0) AS cost_per_solved,
       COALESCE(p.paired_instances, 0) AS paired_instances,
       CAST(p.cost_tokens AS DOUBLE PRECISION) / NULLIF(p.current_cost_tokens, 0) AS cost_of_current,
       t.cache_marked_decisions,
       t.cached_at_marks_tokens,
       CAST(t.cached_at_marks_tokens AS DOUBLE PRECISION) / NULLIF(t.tokens, 0) AS cached_at_marks_share,
       t.cost_at_marks_tokens,
       CAST(t.cost_at_marks_tokens AS DOUBLE PRECISION) / NULLIF(i.solved, 0) AS cost_at_marks_per_solved,
       CAST(p.cost_at_marks_tokens AS DOUBLE PRECISION) / NULLIF(p.current_cost_at_marks_tokens, 0)
           AS cost_at_marks_of_current
FROM arm_total t
JOIN arm_instances i ON i.arm = t.arm AND i.variant = t.variant
LEFT JOIN paired p ON p.arm = t.arm AND p.variant = t.variant
ORDER BY CASE t.arm WHEN 'current' THEN 1 ELSE 2 END, t.arm, t.variant;
