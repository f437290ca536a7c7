-- edge_placement: where decision-critical content sits (§7.6). Critical = the window's
-- gold facts: its evidence items of a gold entity (the plan node names its target entity
-- but holds none of its code); an item is at an edge when the middle of its tokens falls
-- outside the middle half of the window ([25%, 75%) of its tokens). For ctx08 also the
-- role-based view: the share of edge-critical items placed in the front or back block.
SELECT
    arm, variant,
    SUM(is_gold * is_evidence) AS critical_items,
    CAST(SUM(CASE WHEN is_gold = 1 AND is_evidence = 1
                  AND (4 * (2 * tokens_before + token_count) < 2 * window_tokens
                       OR 4 * (2 * tokens_before + token_count) >= 6 * window_tokens)
                 THEN 1 ELSE 0 END) AS DOUBLE PRECISION)
        / NULLIF(SUM(is_gold * is_evidence), 0) AS critical_at_edges,
    SUM(edge_critical) AS edge_critical_items,
    CAST(SUM(CASE WHEN edge_critical = 1 AND block <> 'middle' THEN 1 ELSE 0 END)
         AS DOUBLE PRECISION) / NULLIF(SUM(edge_critical), 0) AS edge_critical_outside_middle
FROM v_window_gold
GROUP BY arm, variant
ORDER BY arm, variant;
