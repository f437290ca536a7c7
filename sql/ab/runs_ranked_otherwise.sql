-- runs_ranked_otherwise: runs of an arm and variant that the A/B runner labelled with
-- another ranker (the reports group runs by arm and variant, so the two would mix).
SELECT run_id, note FROM run
WHERE arm = :arm AND variant = :variant AND note LIKE :ranker_note_pattern AND note <> :note
ORDER BY run_id;
