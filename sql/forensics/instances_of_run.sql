-- instances_of_run: a few instances a run made decisions for, to name them when a
-- `run:RUN:INSTANCE` reference gave the run alone.
SELECT DISTINCT instance_id
FROM decision
WHERE run_id = :run_id
ORDER BY instance_id
LIMIT :instances_named;
