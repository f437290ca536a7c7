-- replay_lengths: per store run, the replayed runs cut into the bound parameter
-- length_groups groups by their length (decisions; shortest first, ties by instance, so
-- runs of one length may fall in two groups; the same groups in every arm), and per group
-- and arm: runs, the shortest and the longest run's decisions, prompt tokens and cost in
-- token units (as replay_arms: a cache read at the bound parameter cached_price_ratio of
-- an input token's price) in total, the tokens as a share of the mask10 arm's and the
-- cost as a share of the current arm's in the same group (over the runs each arm has: the
-- replay writes every arm of every decision). A prompt cache serves the append-only
-- history at a fraction of its price, so in a short run current's cost is mostly each
-- step's new tokens, which a window sends too; what a window saves on the history grows
-- with the run's length, and a set of shorter runs keeps more of current's cost.
WITH run_length AS (
    SELECT run_id, instance_id, decisions,
           NTILE(:length_groups) OVER (PARTITION BY run_id ORDER BY decisions, instance_id)
               AS length_group
    FROM replay_run
),
run_arm AS (  -- one replayed run in one arm
    SELECT run_id, arm, instance_id,
           SUM(prompt_tokens) AS prompt_tokens,
           SUM(cached_tokens) AS cached_tokens
    FROM replay_decision
    GROUP BY run_id, arm, instance_id
),
group_arm AS (  -- one group of runs in one arm
    SELECT a.run_id, a.arm, l.length_group,
           COUNT(*) AS runs,
           MIN(l.decisions) AS shortest_run_decisions,
           MAX(l.decisions) AS longest_run_decisions,
           CAST(SUM(a.prompt_tokens) AS BIGINT) AS prompt_tokens,  -- (PostgreSQL: NUMERIC)
           -- from whole-token sums: the same to the last digit in any order of adding
           SUM(a.prompt_tokens - a.cached_tokens) + :cached_price_ratio * SUM(a.cached_tokens)
               AS cost_tokens
    FROM run_arm a
    JOIN run_length l ON l.run_id = a.run_id AND l.instance_id = a.instance_id
    GROUP BY a.run_id, a.arm, l.length_group
)
SELECT g.run_id, g.length_group, g.arm, g.runs, g.shortest_run_decisions,
       g.longest_run_decisions,
       g.prompt_tokens,
       CAST(g.prompt_tokens AS DOUBLE PRECISION) / NULLIF(m.prompt_tokens, 0) AS tokens_of_mask10,
       g.cost_tokens,
       CAST(g.cost_tokens AS DOUBLE PRECISION) / NULLIF(c.cost_tokens, 0) AS cost_of_current
FROM group_arm g
LEFT JOIN group_arm m
    ON m.run_id = g.run_id AND m.length_group = g.length_group AND m.arm = 'mask10'
LEFT JOIN group_arm c
    ON c.run_id = g.run_id AND c.length_group = g.length_group AND c.arm = 'current'
ORDER BY g.run_id, g.length_group,
         CASE g.arm WHEN 'current' THEN 1 WHEN 'mask10' THEN 2 ELSE 3 END, g.arm;
