-- v_ab_decision: the decisions the A/B reports count — the newest construction of each
-- (run, instance, decision seq), with the run's arm and variant.
CREATE VIEW v_ab_decision AS
SELECT d.decision_id, d.run_id, r.arm, r.variant, d.instance_id, d.seq, d.decision_type,
       d.token_count, d.token_ceiling, d.flags
FROM decision d
JOIN run r ON r.run_id = d.run_id
WHERE d.token_count IS NOT NULL
  AND d.decision_id = (
      SELECT MAX(latest.decision_id) FROM decision latest
      WHERE latest.run_id = d.run_id AND latest.instance_id = d.instance_id
        AND latest.seq = d.seq
  );
