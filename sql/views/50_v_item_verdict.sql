-- v_item_verdict: each pool item's final verdict and what decided it — the analyst's
-- one-row-per-item answer to "what happened to everything the harness gave us?".
CREATE VIEW v_item_verdict AS
SELECT
    e.decision_id,
    e.item_id,
    e.item_no,
    e.source,
    e.kind,
    e.entity_key,
    f.stage AS decided_at,
    f.action AS verdict,
    f.driver
FROM evidence_item e
LEFT JOIN item_event f
    ON f.decision_id = e.decision_id AND f.item_id = e.item_id AND f.is_final;
