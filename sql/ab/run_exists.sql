-- run_exists: one row if the run exists.
SELECT run_id FROM run WHERE run_id = :run_id;
