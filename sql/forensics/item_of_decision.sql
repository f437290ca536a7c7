-- item_of_decision: one pool item, raw (the full text when its content was cut).
SELECT item_id, source, kind, entity_key, provenance, score, path, start_line, end_line,
       in_pool, content, original_content
FROM v_evidence_item
WHERE decision_id = :decision_id AND item_id = :item_id;
