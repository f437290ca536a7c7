-- verdict_counts: pool items of one decision by final verdict.
SELECT verdict, COUNT(*) AS items
FROM v_item_verdict
WHERE decision_id = :decision_id
GROUP BY verdict
ORDER BY verdict;
