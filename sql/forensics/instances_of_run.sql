-- instances_of_run: the instances a run made decisions for, by name, to name them (or
-- the nearest) when a `run:RUN:INSTANCE` reference gave the run alone or another instance.
SELECT DISTINCT instance_id
FROM decision
WHERE run_id = :run_id
ORDER BY instance_id;
