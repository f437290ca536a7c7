-- replay_fidelity: per store run, how faithfully the replays rebuilt their runs' working
-- trees — runs, trees matching the submitted patch (count and share), trees lost at some
-- decision — and one row per cause of the misses (a run whose tree did not match, or
-- was lost): the text of tree_note before its first ':' ('no note' when there is none).
-- A store run without misses has one row, its miss_cause empty and misses 0.
WITH replay AS (
    SELECT run_id,
           CASE WHEN tree_matches_submission THEN 1 ELSE 0 END AS matches,
           CASE WHEN tree_lost_at_seq IS NOT NULL THEN 1 ELSE 0 END AS lost,
           -- the note from its first ':' on: LTRIM strips every leading character that is
           -- not a ':' (SQLite's instr and PostgreSQL's strpos have no common spelling)
           LTRIM(tree_note, REPLACE(tree_note, ':', '')) AS note_tail,
           tree_note
    FROM replay_run
),
per_run AS (
    SELECT run_id,
           COUNT(*) AS runs,
           SUM(matches) AS trees_matching,
           CAST(SUM(matches) AS DOUBLE PRECISION) / COUNT(*) AS matching_share,
           SUM(lost) AS trees_lost
    FROM replay
    GROUP BY run_id
),
miss AS (
    SELECT run_id,
           COALESCE(TRIM(SUBSTR(tree_note, 1, LENGTH(tree_note) - LENGTH(note_tail))),
                    'no note') AS miss_cause,
           COUNT(*) AS misses
    FROM replay
    WHERE matches = 0 OR lost = 1
    GROUP BY run_id, COALESCE(TRIM(SUBSTR(tree_note, 1, LENGTH(tree_note) - LENGTH(note_tail))),
                              'no note')
)
SELECT p.run_id, p.runs, p.trees_matching, p.matching_share, p.trees_lost,
       m.miss_cause, COALESCE(m.misses, 0) AS misses
FROM per_run p
LEFT JOIN miss m ON m.run_id = p.run_id
ORDER BY p.run_id, misses DESC, m.miss_cause;
