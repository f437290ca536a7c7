-- previous_step_of_run: the newest decision a run holds of one instance before a step
-- of its agent loop, with the request it was built from (construct_step refuses a step
-- whose history does not continue that one's).
SELECT d.decision_id, d.seq, d.request_json
FROM decision d
WHERE d.run_id = :run_id AND d.instance_id = :instance_id AND d.seq < :seq
ORDER BY d.seq DESC, d.decision_id DESC
LIMIT 1;
