-- instances_of_run: the instances a run made decisions for (at most the number asked for), to
-- name them when a `run:RUN:INSTANCE` reference gave the run alone or another instance.
SELECT DISTINCT instance_id
FROM decision
WHERE run_id = :run_id
ORDER BY instance_id
LIMIT :instances_named;
