-- runs_of_store: every run of the store, by name, to name the nearest when a
-- `run:RUN:INSTANCE` reference named none of them.
SELECT run_id
FROM run
ORDER BY run_id;
