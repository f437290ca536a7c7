-- v_decision_precision: relevance precision per A/B decision (§7.2): of the evidence a
-- window sent, the share that was needed (a gold fact of its instance), by items and by
-- tokens. The plan obligation and acceptance criteria are left out: every arm sends them.
-- An instance with no gold facts (a live run) has no precision: NULL, not 0.
CREATE VIEW v_decision_precision AS
SELECT
    decision_id, arm, variant, instance_id, decision_type,
    SUM(is_evidence) AS evidence_items,
    SUM(is_gold * is_evidence) AS gold_items,
    CASE WHEN EXISTS (SELECT 1 FROM gold_fact g WHERE g.instance_id = v_window_item_gold.instance_id)
         THEN CAST(SUM(is_gold * is_evidence) AS DOUBLE PRECISION) / NULLIF(SUM(is_evidence), 0) END
        AS precision_items,
    CASE WHEN EXISTS (SELECT 1 FROM gold_fact g WHERE g.instance_id = v_window_item_gold.instance_id)
         THEN CAST(SUM(is_gold * is_evidence * token_count) AS DOUBLE PRECISION)
              / NULLIF(SUM(is_evidence * token_count), 0) END AS precision_tokens
FROM v_window_item_gold
GROUP BY decision_id, arm, variant, instance_id, decision_type;
