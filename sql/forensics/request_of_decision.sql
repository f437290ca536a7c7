-- request_of_decision: the request a decision was built from, as stored (an agent-loop
-- decision's "prefix" holds the harness's own messages the window was sent after; its
-- steps are named by digest, "steps_sha256", each step's JSON an evidence_text row).
SELECT d.request_json
FROM decision d
WHERE d.decision_id = :decision_id;
