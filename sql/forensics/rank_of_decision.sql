-- rank_of_decision: the decision's one ranking call (if any) and its verdict counts.
SELECT c.rank_call_id, c.model, c.parse_status, c.error, c.latency_ms,
       c.prompt_tokens, c.completion_tokens,
       (SELECT COUNT(*) FROM rank_score s WHERE s.rank_call_id = c.rank_call_id) AS candidates,
       (SELECT COUNT(*) FROM rank_score s
         WHERE s.rank_call_id = c.rank_call_id AND s.verdict = 'admit') AS admitted
FROM rank_call c
WHERE c.decision_id = :decision_id;
