-- live_loop_run_held: a row when the store holds a decision of a live agent-loop run (a
-- loop's request names its steps; a replay's runs are left out), as loop_cost.sql reads
-- them: the A/B screen then points to that report. Runs first: a replay's store has no
-- other, and its requests' JSON is not read.
SELECT 1 AS held
FROM run r
WHERE NOT EXISTS (SELECT 1 FROM replay_run p WHERE p.run_id = r.run_id)
  AND EXISTS (SELECT 1 FROM decision d
              WHERE d.run_id = r.run_id
                AND (d.request_json LIKE '%"steps_sha256": [%'
                     OR d.request_json LIKE '%"steps": [%'))
LIMIT 1;
