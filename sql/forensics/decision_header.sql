-- decision_header: one decision with its run's arm and variant.
SELECT d.decision_id, d.run_id, r.arm, r.variant, d.instance_id, d.seq, d.decision_type,
       d.task_text, d.token_count, d.token_ceiling, d.tokenizer, d.flags, d.request_sha256
FROM decision d
JOIN run r ON r.run_id = d.run_id
WHERE d.decision_id = :decision_id;
