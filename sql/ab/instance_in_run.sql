-- instance_in_run: one row if the run made a decision for the instance (an outcome is
-- recorded only for an instance its run worked on).
SELECT 1 AS decided FROM decision
WHERE run_id = :run_id AND instance_id = :instance_id
LIMIT 1;
