-- runs: each A/B run with its arm, variant and ranker — the A/B runner's label in
-- run.note: none (no endpoint), oracle (the instance's gold facts scored 1.0 behind the
-- real HTTP path: an upper bound, not a model) or an endpoint's URL; the baseline makes
-- no ranking call. Decisions are the reports' (the newest construction of each);
-- rank_calls counts their ranking calls, rank_calls_ok those that parsed.
SELECT
    r.run_id, r.arm, r.variant,
    CASE WHEN r.arm = 'current' THEN 'no call (baseline)'
         WHEN r.note LIKE 'ranker: %' THEN SUBSTR(r.note, 9)
    END AS ranker,
    COUNT(d.decision_id) AS decisions,
    COUNT(c.rank_call_id) AS rank_calls,
    SUM(CASE WHEN c.parse_status = 'ok' THEN 1 ELSE 0 END) AS rank_calls_ok
FROM run r
LEFT JOIN v_ab_decision d ON d.run_id = r.run_id
LEFT JOIN rank_call c ON c.decision_id = d.decision_id
GROUP BY r.run_id, r.arm, r.variant, r.note
ORDER BY r.arm DESC, r.variant, r.run_id;
