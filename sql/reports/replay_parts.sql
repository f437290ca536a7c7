-- replay_parts: per store run and constructed arm, where its prompt tokens went — the
-- window's parts by their kind (evidence_item.kind: agent_turn, file_view, tool_output, …)
-- and rendering (verbatim, view, truncated, pointer), with how many parts, their tokens,
-- tokens per decision and their share of the arm's prompt tokens; and the rest of the
-- prompt (part_kind harness_prompt: the harness's own messages, verbatim, and the chat
-- framing), which every arm sends alike. Over the decisions whose window the store holds
-- (replay_decision.decision_id set, not refused).
WITH windows AS (
    SELECT run_id, arm, decision_id, prompt_tokens
    FROM replay_decision
    WHERE decision_id IS NOT NULL AND NOT refused
),
totals AS (
    SELECT run_id, arm, COUNT(*) AS decisions, SUM(prompt_tokens) AS prompt_tokens
    FROM windows
    GROUP BY run_id, arm
),
parts AS (
    SELECT w.run_id, w.arm, e.kind AS part_kind, i.rendering,
           COUNT(*) AS parts, SUM(i.token_count) AS tokens
    FROM windows w
    JOIN window_item i ON i.decision_id = w.decision_id
    JOIN evidence_item e ON e.decision_id = i.decision_id AND e.item_id = i.item_id
    GROUP BY w.run_id, w.arm, e.kind, i.rendering
),
rows AS (
    SELECT run_id, arm, part_kind, rendering, parts, tokens FROM parts
    UNION ALL
    SELECT t.run_id, t.arm, 'harness_prompt', NULL, t.decisions,
           t.prompt_tokens - COALESCE((SELECT SUM(p.tokens) FROM parts p
                                       WHERE p.run_id = t.run_id AND p.arm = t.arm), 0)
    FROM totals t
)
SELECT
    r.run_id, r.arm, r.part_kind, r.rendering, r.parts, r.tokens,
    1.0 * r.tokens / t.decisions AS tokens_per_decision,
    1.0 * r.tokens / NULLIF(t.prompt_tokens, 0) AS share_of_prompt_tokens
FROM rows r
JOIN totals t ON t.run_id = r.run_id AND t.arm = r.arm
ORDER BY r.run_id, r.arm, r.tokens DESC, r.part_kind, r.rendering;
