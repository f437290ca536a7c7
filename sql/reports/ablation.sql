-- ablation: §7.5 — each variant against ctx08/default with everything else fixed; Δ is
-- relative ((variant - default) / default). A source or representation choice is DELETED
-- iff removing it degrades no honest metric beyond noise (5%): precision by items or
-- tokens, gold recall, resolve rate (lower is worse), tokens per solved (higher is
-- worse). A metric that already degrades is final (no outcome can undo it): KEEP, naming
-- the metrics. Otherwise the verdict needs outcomes — resolve rate and tokens per solved
-- — of the variant and the default: until both are recorded it says "needs outcomes",
-- as the §7.4 rule says "undecided". The litm_buried row is the §7.6 probe: burying
-- critical items must degrade the resolve rate.
WITH per_variant AS (
    SELECT p.variant,
           AVG(p.precision_items) AS precision_items,
           AVG(p.precision_tokens) AS precision_tokens,
           AVG(r.gold_recall) AS gold_recall,
           AVG(CAST(d.token_count AS DOUBLE PRECISION)) AS mean_tokens
    FROM v_decision_precision p
    JOIN v_ab_decision d ON d.decision_id = p.decision_id
    LEFT JOIN v_decision_recall r ON r.decision_id = p.decision_id
    WHERE p.arm = 'ctx08'
    GROUP BY p.variant
),
with_outcomes AS (
    SELECT v.*, o.resolve_rate, o.tokens_per_solved
    FROM per_variant v
    LEFT JOIN v_arm_outcome o ON o.arm = 'ctx08' AND o.variant = v.variant
),
deltas AS (
    SELECT
        v.variant,
        v.precision_items, v.precision_tokens, v.gold_recall, v.mean_tokens,
        v.resolve_rate, v.tokens_per_solved, b.resolve_rate AS default_resolve_rate,
        (v.precision_items - b.precision_items) / NULLIF(b.precision_items, 0) AS d_precision_items,
        (v.precision_tokens - b.precision_tokens) / NULLIF(b.precision_tokens, 0) AS d_precision_tokens,
        (v.gold_recall - b.gold_recall) / NULLIF(b.gold_recall, 0) AS d_gold_recall,
        (v.mean_tokens - b.mean_tokens) / NULLIF(b.mean_tokens, 0) AS d_mean_tokens,
        (v.resolve_rate - b.resolve_rate) / NULLIF(b.resolve_rate, 0) AS d_resolve_rate,
        (v.tokens_per_solved - b.tokens_per_solved) / NULLIF(b.tokens_per_solved, 0)
            AS d_tokens_per_solved
    FROM with_outcomes v
    CROSS JOIN (SELECT * FROM with_outcomes WHERE variant = 'default') b
    WHERE v.variant <> 'default'
)
SELECT
    variant, precision_items, d_precision_items, precision_tokens, d_precision_tokens,
    gold_recall, d_gold_recall, mean_tokens, d_mean_tokens, resolve_rate, d_resolve_rate,
    tokens_per_solved, d_tokens_per_solved,
    CASE
        WHEN resolve_rate IS NULL OR default_resolve_rate IS NULL THEN
            CASE WHEN variant <> 'litm_buried' AND degraded <> ''
                     THEN 'KEEP: worse without it: ' || REPLACE(TRIM(degraded), ' ', ', ')
                 ELSE 'needs outcomes' END
        WHEN variant = 'litm_buried' THEN
            CASE WHEN default_resolve_rate = 0 THEN 'probe inconclusive: the default solves none'
                 WHEN d_resolve_rate < -0.05 THEN 'ordering earns its place'
                 ELSE 'ordering FAILS the probe' END
        WHEN degraded <> '' THEN 'KEEP: worse without it: ' || REPLACE(TRIM(degraded), ' ', ', ')
        ELSE 'DELETE: |Δ| <= 5% or better without it'
    END AS verdict
FROM (
    SELECT deltas.*,
           CASE WHEN d_precision_items < -0.05 THEN ' precision_items' ELSE '' END
           || CASE WHEN d_precision_tokens < -0.05 THEN ' precision_tokens' ELSE '' END
           || CASE WHEN d_gold_recall < -0.05 THEN ' gold_recall' ELSE '' END
           || CASE WHEN d_resolve_rate < -0.05 THEN ' resolve_rate' ELSE '' END
           || CASE WHEN d_tokens_per_solved > 0.05 THEN ' tokens_per_solved' ELSE '' END
               AS degraded
    FROM deltas
) judged
ORDER BY variant;
