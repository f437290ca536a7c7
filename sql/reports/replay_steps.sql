-- replay_steps: per store run, arm and decision number (seq), the median prompt tokens
-- (lower middle) over the replayed runs that reach that decision, and how many do — the
-- HTML report's plot of tokens per step. Later steps rest on fewer runs: read them with
-- the runs column.
WITH ranked AS (
    SELECT run_id, arm, seq, prompt_tokens,
           ROW_NUMBER() OVER (PARTITION BY run_id, arm, seq ORDER BY prompt_tokens) AS rank_no,
           COUNT(*) OVER (PARTITION BY run_id, arm, seq) AS runs
    FROM replay_decision
)
SELECT
    run_id, arm, seq,
    MAX(runs) AS runs,
    MIN(CASE WHEN 2 * rank_no >= runs THEN prompt_tokens END) AS median_prompt_tokens
FROM ranked
GROUP BY run_id, arm, seq
ORDER BY run_id, CASE arm WHEN 'current' THEN 1 WHEN 'mask10' THEN 2 ELSE 3 END, arm, seq;
