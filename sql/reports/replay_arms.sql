-- replay_arms: per store run and arm of the replayed agent runs — runs, resolved runs
-- (the evaluation's verdict on the recorded run; not yet evaluated counts as unresolved),
-- decisions, prompt tokens per decision (median: lower middle; p90: nearest rank) and in
-- total, tokens per resolved run (every run's tokens over the resolved runs: the spec's
-- tokens-per-solved), the cached share (cached over prompt tokens), and the cost in token
-- units with a cache read priced at the bound parameter cached_price_ratio times an input
-- token: sum(prompt - cached) + ratio * sum(cached); that cost per run (median over runs)
-- and per resolved run (total over resolved runs); and the decisions to read with care:
-- those whose ctx08 request was refused (the harness's own prompt alone was counted) and
-- those made on a tree not known to be the run's; then the issue's two ratios, each arm's
-- total prompt tokens over mask10's and its cost over current's (of the same store run).
-- The reference arm (current) first.
-- (A sum of sums is cast back to a whole number: PostgreSQL makes it NUMERIC.)
WITH run_arm AS (  -- one replayed run in one arm
    SELECT d.run_id, d.arm, d.instance_id,
           MAX(CASE WHEN r.resolved THEN 1 ELSE 0 END) AS resolved,
           COUNT(*) AS decisions,
           SUM(CASE WHEN d.refused THEN 1 ELSE 0 END) AS refused_decisions,
           SUM(CASE WHEN d.tree_known THEN 0 ELSE 1 END) AS tree_unknown_decisions,
           SUM(d.prompt_tokens) AS prompt_tokens,
           SUM(d.cached_tokens) AS cached_tokens,
           SUM(d.prompt_tokens - d.cached_tokens)
               + :cached_price_ratio * SUM(d.cached_tokens) AS cost_tokens
    FROM replay_decision d
    JOIN replay_run r ON r.run_id = d.run_id AND r.instance_id = d.instance_id
    GROUP BY d.run_id, d.arm, d.instance_id
),
ranked_decision AS (
    SELECT run_id, arm, prompt_tokens,
           ROW_NUMBER() OVER (PARTITION BY run_id, arm ORDER BY prompt_tokens) AS rank_no,
           COUNT(*) OVER (PARTITION BY run_id, arm) AS decisions
    FROM replay_decision
),
decision_tokens AS (
    SELECT run_id, arm,
           MIN(CASE WHEN 2 * rank_no >= decisions THEN prompt_tokens END)
               AS median_prompt_tokens,
           MIN(CASE WHEN 10 * rank_no >= 9 * decisions THEN prompt_tokens END)
               AS p90_prompt_tokens
    FROM ranked_decision
    GROUP BY run_id, arm
),
ranked_run AS (
    SELECT run_id, arm, cost_tokens,
           ROW_NUMBER() OVER (PARTITION BY run_id, arm ORDER BY cost_tokens) AS rank_no,
           COUNT(*) OVER (PARTITION BY run_id, arm) AS runs
    FROM run_arm
),
run_cost AS (
    SELECT run_id, arm,
           MIN(CASE WHEN 2 * rank_no >= runs THEN cost_tokens END) AS median_cost_per_run
    FROM ranked_run
    GROUP BY run_id, arm
),
arm_total AS (
SELECT
    a.run_id, a.arm,
    COUNT(*) AS runs,
    SUM(a.resolved) AS resolved_runs,
    CAST(SUM(a.decisions) AS BIGINT) AS decisions,
    t.median_prompt_tokens,
    t.p90_prompt_tokens,
    CAST(SUM(a.prompt_tokens) AS BIGINT) AS total_prompt_tokens,
    CAST(SUM(a.prompt_tokens) AS DOUBLE PRECISION) / NULLIF(SUM(a.resolved), 0) AS tokens_per_resolved_run,
    CAST(SUM(a.cached_tokens) AS DOUBLE PRECISION) / NULLIF(SUM(a.prompt_tokens), 0) AS cached_share,
    -- from whole-token sums, not a sum of the runs' costs: the same to the last digit
    -- whatever order a backend adds the runs in
    SUM(a.prompt_tokens - a.cached_tokens) + :cached_price_ratio * SUM(a.cached_tokens)
        AS cost_tokens,
    c.median_cost_per_run,
    -- (a float: a ratio given as a whole number would divide whole numbers on SQLite)
    CAST(SUM(a.prompt_tokens - a.cached_tokens)
         + :cached_price_ratio * SUM(a.cached_tokens) AS DOUBLE PRECISION)
        / NULLIF(SUM(a.resolved), 0) AS cost_per_resolved_run,
    CAST(SUM(a.refused_decisions) AS BIGINT) AS refused_decisions,
    CAST(SUM(a.tree_unknown_decisions) AS BIGINT) AS tree_unknown_decisions
FROM run_arm a
JOIN decision_tokens t ON t.run_id = a.run_id AND t.arm = a.arm
JOIN run_cost c ON c.run_id = a.run_id AND c.arm = a.arm
GROUP BY a.run_id, a.arm, t.median_prompt_tokens, t.p90_prompt_tokens, c.median_cost_per_run
)
SELECT x.*,
       CAST(x.total_prompt_tokens AS DOUBLE PRECISION) / NULLIF(m.total_prompt_tokens, 0) AS tokens_of_mask10,
       CAST(x.cost_tokens AS DOUBLE PRECISION) / NULLIF(c.cost_tokens, 0) AS cost_of_current
FROM arm_total x
LEFT JOIN arm_total m ON m.run_id = x.run_id AND m.arm = 'mask10'
LEFT JOIN arm_total c ON c.run_id = x.run_id AND c.arm = 'current'
ORDER BY x.run_id, CASE x.arm WHEN 'current' THEN 1 WHEN 'mask10' THEN 2 ELSE 3 END, x.arm;
