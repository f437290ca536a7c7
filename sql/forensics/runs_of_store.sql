-- runs_of_store: the runs whose decisions the store holds, by name (at most the number
-- asked for), to name the nearest when a `run:RUN:INSTANCE` reference named none of them.
SELECT DISTINCT run_id
FROM decision
ORDER BY run_id
LIMIT :runs_listed;
