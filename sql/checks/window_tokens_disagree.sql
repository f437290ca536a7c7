-- window_tokens_disagree: decisions whose recorded token_count is less than the sum
-- of their window items' counts (the budgeter must account for every item it sent).
SELECT d.decision_id, d.token_count, SUM(w.token_count) AS window_item_tokens
FROM decision d
JOIN window_item w ON w.decision_id = d.decision_id
GROUP BY d.decision_id, d.token_count
HAVING d.token_count IS NULL OR d.token_count < SUM(w.token_count)
ORDER BY d.decision_id;
