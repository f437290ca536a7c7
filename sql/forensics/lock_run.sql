-- lock_run (PostgreSQL): the lock of one agent-loop run and instance, held to the end of
-- the transaction, so two writers of the run's steps take turns (construct_step checks a
-- step is new under it). hashtext maps the key to the lock's integer; two runs that
-- share one only wait for each other.
SELECT pg_advisory_xact_lock(hashtext(:run_key));
