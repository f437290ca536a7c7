-- window_over_ceiling: constructed (ctx08) windows counted above their ceiling (§3.7,
-- invariant 7: "no window over the ceiling is ever emitted"). The `current` arm is the
-- no-budget baseline by definition and is not held to the ceiling; nor is an agent-loop
-- step whose window could not fit, recorded as the harness's own messages it sent
-- instead (flag harness_sent_over_ceiling: ctxdb emitted no window there).
SELECT d.decision_id, d.token_count, d.token_ceiling, d.tokenizer
FROM decision d
JOIN run r ON r.run_id = d.run_id
WHERE r.arm = 'ctx08' AND d.token_count IS NOT NULL AND d.token_count > d.token_ceiling
  AND REPLACE(',' || d.flags || ',', ',' || :harness_sent_flag || ',', '')
      = ',' || d.flags || ','
ORDER BY d.decision_id;
