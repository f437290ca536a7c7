-- delete_gold_facts: an instance's gold facts, before they are extracted again.
DELETE FROM gold_fact WHERE instance_id = :instance_id;
