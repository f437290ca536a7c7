-- v_window_gold: every window item of an A/B decision (v_window_item_gold: whether it is
-- a gold fact, whether it is evidence) and where its tokens sit in the window. Filter by
-- decision_id: the window sums are partitioned by it, so the filter reaches window_item.
CREATE VIEW v_window_gold AS
SELECT
    i.*,
    SUM(i.token_count) OVER (PARTITION BY i.decision_id ORDER BY i.position)
        - i.token_count AS tokens_before,
    SUM(i.token_count) OVER (PARTITION BY i.decision_id) AS window_tokens
FROM v_window_item_gold i;
