-- item_without_one_final_verdict: pool items of a constructed decision that do not end
-- with exactly one final verdict (in_window, rejected, deduped, masked, evicted, folded).
SELECT e.decision_id, e.item_id, COUNT(f.event_no) AS final_events
FROM evidence_item e
JOIN decision d ON d.decision_id = e.decision_id
LEFT JOIN item_event f
    ON f.decision_id = e.decision_id AND f.item_id = e.item_id AND f.is_final
WHERE d.token_count IS NOT NULL
GROUP BY e.decision_id, e.item_id
HAVING COUNT(f.event_no) <> 1
ORDER BY e.decision_id, e.item_id;
