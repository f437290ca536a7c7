-- placement_bins: per arm and variant, how many window items have the middle of their
-- tokens in each of BINS equal parts of the window (bin 0 holds the start): the
-- critical items (is_gold = 1, counted as edge_placement.sql counts them) and the other
-- evidence items (is_gold = 0); the plan node and criteria every arm sends are left out
-- — the placement plot. Integer arithmetic: floor(bins * middle / window_tokens), the
-- last bin holding an item whose middle is the window's end.
SELECT arm, variant, is_gold, bin_no, COUNT(*) AS items
FROM (
    SELECT arm, variant, is_gold,
           CASE WHEN 2 * tokens_before + token_count >= 2 * window_tokens THEN :bins - 1
                ELSE :bins * (2 * tokens_before + token_count) / (2 * window_tokens)
           END AS bin_no
    FROM v_window_gold
    WHERE is_evidence = 1 AND window_tokens > 0
) placed
GROUP BY arm, variant, is_gold, bin_no
ORDER BY arm, variant, is_gold, bin_no;
