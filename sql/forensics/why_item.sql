-- why_item: an item's path through the stages (v_why), in order.
SELECT event_no, stage, action, driver, tokens_before, tokens_after, is_final, detail,
       source, kind, entity_key, provenance, window_position, window_block, window_rendering
FROM v_why
WHERE decision_id = :decision_id AND item_id = :item_id
ORDER BY event_no;
