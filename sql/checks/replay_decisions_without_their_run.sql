-- replay_decisions_without_their_run: windows a replay built for a recorded run whose
-- replay_run row is missing. A replay writes that row last, so these are the decisions
-- of a replay that was killed (SIGKILL) or lost its database mid-run, and cannot undo
-- them, or of one still under way. `ctxdb replay` of the instance again replaces them.
SELECT d.run_id, d.instance_id, COUNT(*) AS decisions, MIN(d.seq) AS first_seq,
       MAX(d.seq) AS last_seq
FROM decision d
JOIN run r ON r.run_id = d.run_id
LEFT JOIN replay_run rr ON rr.run_id = d.run_id AND rr.instance_id = d.instance_id
WHERE r.note = :replay_run_note AND rr.instance_id IS NULL
GROUP BY d.run_id, d.instance_id
ORDER BY d.run_id, d.instance_id;
