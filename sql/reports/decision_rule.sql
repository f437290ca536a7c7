-- decision_rule: spec §7.4 evaluated as written — the candidate (ctx08/default) wins iff
-- tokens-per-solved strictly beats the "stuff everything" baseline (current/default),
-- relevance precision strictly improves, resolve does not regress, and cost and tokens
-- stay within 1.5x. One row per clause, then the verdict: a failed clause loses; else
-- undecided says what is missing:
-- outcomes, their cost (cost_usd), or precision, which an agent loop's windows have none
-- of (they hold no gold; its arms compare by ctxdb report loop_cost).
WITH metrics AS (
    SELECT p.arm, AVG(p.precision_items) AS precision_items,
           o.resolve_rate, o.cost_per_instance, o.tokens_per_instance, o.tokens_per_solved,
           o.solved
    FROM v_decision_precision p
    LEFT JOIN v_arm_outcome o ON o.arm = p.arm AND o.variant = p.variant
    WHERE p.variant = 'default'
    GROUP BY p.arm, o.resolve_rate, o.cost_per_instance, o.tokens_per_instance,
             o.tokens_per_solved, o.solved
),
c AS (SELECT * FROM metrics WHERE arm = 'ctx08'),
b AS (SELECT * FROM metrics WHERE arm = 'current'),
clauses AS (
    SELECT 1 AS clause_no, 'tokens-per-solved strictly beats the baseline (KEY)' AS clause,
           c.tokens_per_solved AS candidate, b.tokens_per_solved AS baseline,
           CASE WHEN c.solved IS NULL OR b.solved IS NULL THEN 'no outcomes'
                WHEN c.tokens_per_solved IS NULL THEN 'fail'
                WHEN b.tokens_per_solved IS NULL THEN 'pass'
                WHEN c.tokens_per_solved < b.tokens_per_solved THEN 'pass'
                ELSE 'fail' END AS verdict
    FROM c, b
    UNION ALL
    SELECT 2, 'relevance precision strictly improves', c.precision_items, b.precision_items,
           CASE WHEN c.precision_items IS NULL OR b.precision_items IS NULL THEN 'no data'
                WHEN c.precision_items > b.precision_items THEN 'pass' ELSE 'fail' END
    FROM c, b
    UNION ALL
    SELECT 3, 'resolve rate does not regress', c.resolve_rate, b.resolve_rate,
           CASE WHEN c.resolve_rate IS NULL OR b.resolve_rate IS NULL THEN 'no outcomes'
                WHEN c.resolve_rate >= b.resolve_rate THEN 'pass' ELSE 'fail' END
    FROM c, b
    UNION ALL
    SELECT 4, 'cost <= 1.5 x baseline', c.cost_per_instance, b.cost_per_instance,
           CASE WHEN c.solved IS NULL OR b.solved IS NULL THEN 'no outcomes'
                WHEN c.cost_per_instance IS NULL OR b.cost_per_instance IS NULL
                    THEN 'no cost recorded'
                WHEN c.cost_per_instance <= 1.5 * b.cost_per_instance THEN 'pass'
                ELSE 'fail' END
    FROM c, b
    UNION ALL
    SELECT 5, 'tokens <= 1.5 x baseline', c.tokens_per_instance, b.tokens_per_instance,
           CASE WHEN c.tokens_per_instance IS NULL OR b.tokens_per_instance IS NULL
                    THEN 'no outcomes'
                WHEN c.tokens_per_instance <= 1.5 * b.tokens_per_instance THEN 'pass'
                ELSE 'fail' END
    FROM c, b
)
SELECT clause_no, clause, candidate, baseline, verdict FROM clauses
UNION ALL
SELECT 6, 'DECISION (§7.4): candidate wins iff every clause passes', NULL, NULL,
       CASE WHEN (SELECT COUNT(*) FROM clauses) = 0 THEN 'no data'
            WHEN (SELECT COUNT(*) FROM clauses WHERE verdict = 'pass') = 5 THEN 'WIN: adopt'
            -- a failed clause decides it, whatever the others still lack
            WHEN (SELECT COUNT(*) FROM clauses WHERE verdict = 'fail') > 0
                THEN 'LOSE: keep the current path'
            WHEN (SELECT COUNT(*) FROM clauses WHERE verdict = 'no outcomes') > 0
                THEN 'undecided: record outcomes'
            WHEN (SELECT COUNT(*) FROM clauses WHERE verdict = 'no cost recorded') > 0
                THEN 'undecided: record outcomes with cost_usd'
            WHEN (SELECT COUNT(*) FROM clauses WHERE verdict = 'no data') > 0
                THEN 'undecided: no precision (an agent loop''s: ctxdb report loop_cost)'
            ELSE 'LOSE: keep the current path' END
ORDER BY clause_no;
