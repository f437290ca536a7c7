-- v_duplicate_fact: pool items of one decision that state the same fact (spec §3.5),
-- grouped by fact identity (symbol identity, normalized failure text, definition site).
-- One row per item in a group of two or more; dedup keeps the strongest role of each.
-- An agent loop's parts have no fact identity (fact_key ''): each is its step's own.
CREATE VIEW v_duplicate_fact AS
SELECT
    e.decision_id,
    e.fact_key,
    e.item_id,
    e.item_no,
    e.source,
    e.kind,
    e.entity_key,
    (SELECT COUNT(*) FROM evidence_item g
      WHERE g.decision_id = e.decision_id AND g.fact_key = e.fact_key) AS group_size
FROM evidence_item e
WHERE e.fact_key <> ''
  AND EXISTS (
    SELECT 1 FROM evidence_item other
    WHERE other.decision_id = e.decision_id
      AND other.fact_key = e.fact_key
      AND other.item_id <> e.item_id
);
