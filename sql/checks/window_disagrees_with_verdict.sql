-- window_disagrees_with_verdict: an item in the window whose final verdict is not
-- in_window/masked, or an item with such a verdict that is not in the window.
SELECT f.decision_id, f.item_id, f.action AS final_verdict, w.position
FROM item_event f
LEFT JOIN window_item w ON w.decision_id = f.decision_id AND w.item_id = f.item_id
WHERE f.is_final
  AND ((f.action IN ('in_window', 'masked')) <> (w.item_id IS NOT NULL))
ORDER BY f.decision_id, f.item_id;
