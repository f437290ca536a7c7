-- tokens_by_tier: window tokens of one decision by §3.7 tier.
SELECT tier, COUNT(*) AS items, SUM(token_count) AS tokens
FROM window_item
WHERE decision_id = :decision_id
GROUP BY tier
ORDER BY tier;
