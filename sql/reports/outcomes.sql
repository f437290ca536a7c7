-- outcomes: resolve rate, cost, tokens per instance and tokens per solved instance.
SELECT arm, variant, instances, solved, resolve_rate, cost_per_instance,
       tokens_per_instance, tokens_per_solved
FROM v_arm_outcome
ORDER BY arm, variant;
