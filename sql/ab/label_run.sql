-- label_run: the A/B runner's note on a run — which ranker its decisions were ranked by.
UPDATE run SET note = :note WHERE run_id = :run_id;
