-- gold_fact_keys: the entity keys of an instance's gold facts (what the oracle ranker scores 1.0).
SELECT DISTINCT entity_key FROM gold_fact WHERE instance_id = :instance_id ORDER BY entity_key;
