-- window_over_ceiling: decisions whose window was counted above its ceiling (§3.7,
-- invariant 7: "no window over the ceiling is ever emitted").
SELECT decision_id, token_count, token_ceiling, tokenizer
FROM decision
WHERE token_count IS NOT NULL AND token_count > token_ceiling
ORDER BY decision_id;
