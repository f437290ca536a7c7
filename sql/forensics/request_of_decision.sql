-- request_of_decision: the request a decision was built from, as stored (an agent-loop
-- decision names the harness's own messages the window was sent after by digest,
-- "prefix_sha256" — inline as "prefix" before 2026-12-05 — and its steps likewise,
-- "steps_sha256": each one's JSON an evidence_text row).
SELECT d.request_json
FROM decision d
WHERE d.decision_id = :decision_id;
