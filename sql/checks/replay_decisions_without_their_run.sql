-- replay_decisions_without_their_run: windows a replay built for a recorded run whose
-- replay_run row is missing, and whose replay is not under way. A replay writes that row
-- last, so these are the decisions of a replay that was killed (SIGKILL) or lost its
-- database mid-run and could not undo them. A replay under way renews its lease in
-- replay_in_progress at every step; its decisions count here once the lease has run out
-- (expires_at before now, both UTC ISO 8601 text). A replay again holds the run's earlier
-- decisions aside under the instance id 'held aside by replay ' and its lease id until it
-- is written (or puts them back): those count here once that lease has run out. `ctxdb
-- replay` of the instance again replaces them.
SELECT d.run_id,
       -- held aside: named by the instance the lease is of, which a replay again cleans
       COALESCE((SELECT p.instance_id || ', held aside by replay ' || p.lease_id
                 FROM replay_in_progress p
                 WHERE p.run_id = d.run_id
                   AND d.instance_id = :replay_held_prefix || p.lease_id), d.instance_id)
           AS instance_id,
       COUNT(*) AS decisions, MIN(d.seq) AS first_seq, MAX(d.seq) AS last_seq
FROM decision d
JOIN run r ON r.run_id = d.run_id
LEFT JOIN replay_run rr ON rr.run_id = d.run_id AND rr.instance_id = d.instance_id
WHERE r.note = :replay_run_note AND rr.instance_id IS NULL
  AND NOT EXISTS (
      SELECT 1 FROM replay_in_progress p
      WHERE p.run_id = d.run_id AND p.expires_at > :now
        AND (p.instance_id = d.instance_id
             OR d.instance_id = :replay_held_prefix || p.lease_id))
GROUP BY d.run_id, d.instance_id
ORDER BY d.run_id, d.instance_id;
