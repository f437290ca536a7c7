"""kill -9 at random moments: what a crashed writer leaves in the store (issue 14).

    python bench/crash.py [--trials 100] [--postgres] [--seed 14]

Each trial starts a writer process on one store (SQLite in WAL mode in a temporary
directory, or a throwaway PostgreSQL cluster as tests/pgcluster.py starts one) that
makes decisions back to back — ordinary ones, every third one heavy (240 extra 8 KB
items: a long write) — and reports each decision id once ``construct`` has returned it.
Once the writer has made its first decision it is killed with SIGKILL after a random
pause, so the kill lands anywhere: in assembly, the preview, the stages, the write
transaction or its commit. After every kill:

- partial decisions: a decision row without its obligation, pool, audit events, budget
  log or token count, or one the store's checks (``ContextStore.verify``) fault;
- integrity: SQLite's ``PRAGMA integrity_check`` (``ok`` or not);
- committed-then-missing: ids the writer reported that the store does not hold.

The LAST line is the figures as key=value pairs.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "tests"))

HEAVY_EVERY = 3  # every third decision of a writer is heavy
KILL_AFTER_MAX_S = 1.5  # the pause before the kill, uniform from 0
READY = "ready"
SEED = 14  # issue 14

PARTIAL_DECISIONS = """
SELECT d.decision_id FROM decision d
WHERE d.token_count IS NULL
   OR NOT EXISTS (SELECT 1 FROM obligation o WHERE o.decision_id = d.decision_id)
   OR NOT EXISTS (SELECT 1 FROM evidence_item e WHERE e.decision_id = d.decision_id)
   OR NOT EXISTS (SELECT 1 FROM item_event v WHERE v.decision_id = d.decision_id)
   OR NOT EXISTS (SELECT 1 FROM budget_log b WHERE b.decision_id = d.decision_id)
"""


def writer(url: str, trial: int) -> None:
    """The child: decisions until killed, each id on stdout once committed."""
    import logging

    from load import HEAVY_CORPUS, heavy_text, request_for

    from ctxdb import ContextStore

    logging.getLogger("ctxdb").setLevel(logging.ERROR)
    corpus = [heavy_text(n) for n in range(HEAVY_CORPUS)]
    with ContextStore.open(url) as store:
        for seq in range(1, 1_000_000):
            pool = "heavy" if seq % HEAVY_EVERY == 0 else "ordinary"
            request = request_for(pool, trial, seq, corpus) | {"run_id": f"crash-t{trial}"}
            decision_id = store.construct(request).decision_id
            print(decision_id, flush=True)
            if seq == 1:
                print(READY, flush=True)


def trial_outcome(url: str, reported: set[int], sqlite: bool) -> dict:
    from sqlalchemy import text

    from ctxdb import ContextStore

    with ContextStore.open(url) as store:
        with store.engine.connect() as connection:
            partial = set(connection.execute(text(PARTIAL_DECISIONS)).scalars())
            present = set(connection.execute(text("SELECT decision_id FROM decision")).scalars())
            integrity = (connection.exec_driver_sql("PRAGMA integrity_check").scalar()
                         if sqlite else "n/a")
        faults = store.verify()
    return {"partial": partial, "missing": reported - present, "integrity": integrity,
            "faults": faults}


def run_trial(url: str, trial: int, rng: random.Random) -> tuple[set[int], float]:
    """One writer killed: the ids it reported, and when after its first decision."""
    child = subprocess.Popen(
        [sys.executable, __file__, "--writer", url, str(trial)],
        stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    reported: set[int] = set()
    for line in child.stdout:
        line = line.strip()
        if line == READY:
            break
        reported.add(int(line))
    else:
        raise RuntimeError(f"trial {trial}: the writer ended before its first decision "
                           f"(exit {child.wait()})")
    pause = rng.uniform(0, KILL_AFTER_MAX_S)
    time.sleep(pause)
    child.send_signal(signal.SIGKILL)
    rest, _ = child.communicate()
    # a line is only complete once its newline came: a half-written one is not reported
    reported |= {int(line) for line in rest.split("\n")[:-1] if line.strip()}
    return reported, pause


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--writer":
        writer(sys.argv[2], int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--postgres", action="store_true",
                        help="a throwaway PostgreSQL cluster (tests/pgcluster.py)")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    rng = random.Random(args.seed)

    cluster = None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            if args.postgres:
                from pgcluster import PostgresCluster

                cluster = PostgresCluster()
                cluster.start()
                url, sqlite = cluster.create_database("ctxdb_crash"), False
            else:
                url, sqlite = str(Path(tmp) / "crash.db"), True
            totals = {"trials": 0, "decisions_reported": 0, "partial_decisions": 0,
                      "committed_then_missing": 0, "integrity_failures": 0,
                      "check_faults": 0}
            for trial in range(1, args.trials + 1):
                reported, pause = run_trial(url, trial, rng)
                outcome = trial_outcome(url, reported, sqlite)
                totals["trials"] += 1
                totals["decisions_reported"] += len(reported)
                totals["partial_decisions"] += len(outcome["partial"])
                totals["committed_then_missing"] += len(outcome["missing"])
                totals["integrity_failures"] += outcome["integrity"] not in ("ok", "n/a")
                totals["check_faults"] += sum(len(rows) for rows in outcome["faults"].values())
                if outcome["partial"] or outcome["missing"] or outcome["faults"] or \
                        outcome["integrity"] not in ("ok", "n/a"):
                    print(f"trial {trial}: killed {pause:.2f} s in: partial"
                          f" {sorted(outcome['partial'])}, missing {sorted(outcome['missing'])},"
                          f" integrity {outcome['integrity']}, faults {outcome['faults']}",
                          flush=True)
                elif trial % 10 == 0:
                    print(f"{trial} trials: {totals['decisions_reported']} decisions reported,"
                          f" nothing partial or missing", flush=True)
        finally:
            if cluster is not None:
                cluster.stop()
    totals["backend"] = "sqlite" if sqlite else "postgresql"
    print(" ".join(f"{k}={v}" for k, v in totals.items()))


if __name__ == "__main__":
    main()
