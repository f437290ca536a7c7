-- newest_decision_of_run: the newest decision of one instance of a run (the
-- `run:RUN:INSTANCE` an agent-loop window names: its parts keep their item ids from
-- step to step, so the newest decision holds every part the run's windows showed).
SELECT decision_id
FROM decision
WHERE run_id = :run_id AND instance_id = :instance_id
ORDER BY seq DESC, decision_id DESC
LIMIT 1;
