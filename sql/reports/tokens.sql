-- tokens: tokens per decision by arm, variant and decision type — median (lower middle),
-- p95 (nearest rank), max — and budget adherence, the share of windows within their
-- ceiling (§3.7: 1.0 for ctx08's own windows; under it where an agent-loop step's window
-- could not fit and the harness's messages went instead, harness_sent_over_ceiling; the
-- baseline has no budget).
WITH ranked AS (
    SELECT arm, variant, decision_type, token_count, token_ceiling,
           ROW_NUMBER() OVER (PARTITION BY arm, variant, decision_type
                              ORDER BY token_count) AS rank_no,
           COUNT(*) OVER (PARTITION BY arm, variant, decision_type) AS decisions
    FROM v_ab_decision
)
SELECT
    arm, variant, decision_type,
    MAX(decisions) AS decisions,
    MIN(CASE WHEN 2 * rank_no >= decisions THEN token_count END) AS median_tokens,
    MIN(CASE WHEN 100 * rank_no >= 95 * decisions THEN token_count END) AS p95_tokens,
    MAX(token_count) AS max_tokens,
    AVG(CAST(CASE WHEN token_count <= token_ceiling THEN 1 ELSE 0 END AS DOUBLE PRECISION)) AS budget_adherence
FROM ranked
GROUP BY arm, variant, decision_type
ORDER BY decision_type, arm, variant;
