-- step_of_run: the decisions a run holds of one step of an agent loop on one instance,
-- with the request each was built from (construct_step refuses a step of another
-- history under a run it already holds).
SELECT d.decision_id, d.request_json
FROM decision d
WHERE d.run_id = :run_id AND d.instance_id = :instance_id AND d.seq = :seq
ORDER BY d.decision_id;
