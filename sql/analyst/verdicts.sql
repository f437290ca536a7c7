-- verdicts: what happened to a decision's pool, by final verdict and the driver that
-- decided it, largest first. :decision_id left empty (or unbound) means the newest
-- decision.
SELECT v.decision_id, v.verdict, v.decided_at, v.driver, COUNT(*) AS items
FROM v_item_verdict v
WHERE v.decision_id = COALESCE(CAST(NULLIF(:decision_id, '') AS INTEGER),
                               (SELECT MAX(decision_id) FROM decision))
GROUP BY v.decision_id, v.verdict, v.decided_at, v.driver
ORDER BY items DESC, v.verdict, v.driver;
