-- loop_prefix_of_decision: the request an agent-loop decision was built from, as given
-- (its "prefix" holds the harness's own messages the window was sent after).
SELECT d.request_json
FROM decision d
WHERE d.decision_id = :decision_id;
