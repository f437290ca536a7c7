-- v_decision_overview: one row per decision — its run's arm and variant, the pool
-- size, how many items reached the window, and tokens sent against the ceiling.
CREATE VIEW v_decision_overview AS
SELECT
    d.decision_id,
    d.run_id,
    r.arm,
    r.variant,
    d.instance_id,
    d.seq,
    d.decision_type,
    (SELECT COUNT(*) FROM evidence_item e WHERE e.decision_id = d.decision_id) AS pool_items,
    (SELECT COUNT(*) FROM window_item w WHERE w.decision_id = d.decision_id) AS window_items,
    d.token_count,
    d.token_ceiling,
    d.tokenizer,
    d.flags,
    d.created_at
FROM decision d
JOIN run r ON r.run_id = d.run_id;
