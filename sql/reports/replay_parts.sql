-- replay_parts: per store run and constructed arm, where its prompt tokens went — the
-- window's parts by their kind (evidence_item.kind: agent_turn, file_view, tool_output, …)
-- and rendering (verbatim, view, truncated, pointer), with how many parts, their tokens,
-- tokens per decision and their share of the arm's prompt tokens; and the rest of the
-- prompt as part_kind harness_prompt, a part per decision: the harness's own messages,
-- verbatim (nearly what every arm sends), with the chat framing. The window's one-line
-- header (how to read a masked part back) is sent as the start of its first part, so its
-- tokens count with that part (the first step's command: agent_turn, verbatim). Over the
-- decisions whose window the store holds (replay_decision.decision_id set: a refused
-- request has none).
WITH windows AS (
    SELECT run_id, arm, decision_id, prompt_tokens
    FROM replay_decision
    WHERE decision_id IS NOT NULL
),
totals AS (
    SELECT w.run_id, w.arm, COUNT(*) AS decisions, SUM(w.prompt_tokens) AS prompt_tokens,
           SUM((SELECT SUM(i.token_count) FROM window_item i
                WHERE i.decision_id = w.decision_id)) AS window_tokens
    FROM windows w
    GROUP BY w.run_id, w.arm
),
by_part AS (
    SELECT w.run_id, w.arm, e.kind AS part_kind, i.rendering,
           COUNT(*) AS parts, SUM(i.token_count) AS tokens
    FROM windows w
    JOIN window_item i ON i.decision_id = w.decision_id
    JOIN evidence_item e ON e.decision_id = i.decision_id AND e.item_id = i.item_id
    GROUP BY w.run_id, w.arm, e.kind, i.rendering
    UNION ALL
    -- (a whole number on PostgreSQL too, where a sum of sums is NUMERIC)
    SELECT run_id, arm, 'harness_prompt', NULL, decisions,
           CAST(prompt_tokens - COALESCE(window_tokens, 0) AS BIGINT)
    FROM totals
)
SELECT
    p.run_id, p.arm, p.part_kind, p.rendering, p.parts, p.tokens,
    CAST(p.tokens AS DOUBLE PRECISION) / t.decisions AS tokens_per_decision,
    CAST(p.tokens AS DOUBLE PRECISION) / NULLIF(t.prompt_tokens, 0) AS share_of_prompt_tokens
FROM by_part p
JOIN totals t ON t.run_id = p.run_id AND t.arm = p.arm
ORDER BY p.run_id, p.arm, p.tokens DESC, p.part_kind, p.rendering;
