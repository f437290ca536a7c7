-- delete_outcome: a run's outcome for an instance, before it is recorded again.
DELETE FROM outcome WHERE run_id = :run_id AND instance_id = :instance_id;
