-- critical_positions: each A/B window item's relative position (0 = start, 1 = end, by
-- the middle of its tokens) and whether it is a gold fact — for the placement plot.
SELECT decision_id, arm, variant, is_gold,
       (tokens_before + token_count / 2.0) / NULLIF(window_tokens, 0) AS relative_position
FROM v_window_gold
ORDER BY decision_id, position;
