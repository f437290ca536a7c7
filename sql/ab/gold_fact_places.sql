-- gold_fact_places: where an instance's gold facts sit (what the oracle ranker scores
-- 1.0 a candidate for holding): entity key, path, base-commit lines, def/class line.
SELECT DISTINCT entity_key, path, start_line, end_line, head_text
FROM gold_fact WHERE instance_id = :instance_id
ORDER BY entity_key;
