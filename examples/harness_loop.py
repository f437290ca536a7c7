"""A worked harness: six decisions of an agent loop over real code, through ctxdb's
public API only.

The repository is the requests 2.32.3 sdist from PyPI (downloaded on first use). A bug
is planted in ``CaseInsensitiveDict.__setitem__`` (keys are stored without lowering),
and a scripted agent — no model: the point is what each window holds — works it:

    1 localize  retrieval candidates, grep hits                     (grep output, seq 1)
    2 read      the file the localization points at; a reproducer   (traceback, seq 2)
    3 edit      the traceback's site, ``__getitem__`` — a wrong fix (pytest fails, seq 3)
    4 repair    pytest's failures after the edit, under a tight ceiling (pytest, seq 4)
    5 edit      the real site, ``__setitem__``; ``__getitem__`` reverted
    6 other     confirm: pytest passes                               (pytest, seq 6)

Each edit changes the working tree and re-indexes recon incrementally, so the next
window shows the code as it now is; the working-tree diff is the live patch. Every
observation is a ``live.events`` entry with the decision it arrived in, which is what
lets live state age: a newer failure of the same test or at the same site supersedes an
older one, the newest test output supersedes the older ones, and tool output more than
three decisions old is masked to its pointer (``store.show`` gives it back).

    python examples/harness_loop.py [--workdir DIR] [--db URL]

prints each window's tokens and what entered or left it since the previous decision
(``*``: the same fact with another text — edited code, a new obligation).
``run_loop`` returns the same as data (the test reads it).
"""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ctxdb import ContextStore, RequestBuilder
from ctxdb.recon import index_repository

SDIST = "requests==2.32.3"
SDIST_ROOT = "requests-2.32.3"
MODULE = "src/requests/structures.py"
TESTS = "tests/test_structures.py"
CLASS = f"{MODULE}::CaseInsensitiveDict"
RUN_ID = "harness-loop"
INSTANCE_ID = "requests-cid-setitem"
REPAIR_CEILING = 900  # tokens: tight enough that the repair window must mask and evict

TASK = """\
CaseInsensitiveDict is no longer case-insensitive

After upgrading, header lookups fail unless the exact case is used:

```python
>>> from requests.structures import CaseInsensitiveDict
>>> headers = CaseInsensitiveDict()
>>> headers["Accept"] = "application/json"
>>> headers["accept"]
KeyError: 'accept'
```

`cid['aCCEPT']` should return the value stored under `'Accept'`, as the class docstring
promises; `del`, `lower_items()` and equality are affected too.
"""

CORRECT_SETITEM = "        self._store[key.lower()] = (key, value)\n"
PLANTED_SETITEM = "        self._store[key] = (key, value)\n"
GETITEM = "        return self._store[key.lower()][1]\n"
# the agent's first attempt: make the lookup tolerant instead of fixing the store
WRONG_GETITEM = (
    "        for stored_key, (_, value) in self._store.items():\n"
    "            if stored_key.lower() == key.lower():\n"
    "                return value\n"
    "        raise KeyError(key)\n"
)
GREP_COMMAND = "grep -rn 'class CaseInsensitiveDict' src"
PYTEST_COMMAND = f"pytest -q --tb=short -rf {TESTS}"
REPRODUCER_COMMAND = "python repro.py"  # the example, as the agent saved it
REPRODUCER = ("from requests.structures import CaseInsensitiveDict\n"
              "headers = CaseInsensitiveDict()\nheaders['Accept'] = 'application/json'\n"
              "print(headers['accept'])\n")


@dataclass
class DecisionRecord:
    seq: int
    decision_type: str
    decision_id: int
    token_count: int
    ceiling: int
    verdicts: dict[str, int]
    entered: list[str] = field(default_factory=list)  # facts new since the previous window
    left: list[str] = field(default_factory=list)
    rewritten: list[str] = field(default_factory=list)  # the same fact with another text
    tests_passed: bool | None = None  # the pytest run this decision led to, if any


def fetch_sdist(workdir: Path) -> Path:
    """The pristine extracted sdist under ``workdir`` (downloaded once)."""
    pristine = workdir / "pristine" / SDIST_ROOT
    if not pristine.is_dir():
        download = workdir / "download"
        download.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                        ":all:", "--disable-pip-version-check", "-q", SDIST, "-d", str(download)],
                       check=True)
        (archive,) = download.glob(f"{SDIST_ROOT}.tar.gz")
        with tarfile.open(archive) as tar:
            tar.extractall(workdir / "pristine", filter="data")
    return pristine


class WorkingTree:
    """The repository the agent edits: a copy of the pristine sdist with the bug planted."""

    def __init__(self, pristine: Path, root: Path):
        if root.exists():
            shutil.rmtree(root)
        shutil.copytree(pristine, root)
        self.pristine, self.root = pristine, root
        self.replace(CORRECT_SETITEM, PLANTED_SETITEM)
        self.baseline = self.read()  # the tree the agent was handed: its diff starts here

    def read(self) -> str:
        return (self.root / MODULE).read_text()

    def replace(self, old: str, new: str) -> None:
        text = self.read()
        if text.count(old) != 1:
            raise RuntimeError(f"{MODULE}: expected exactly one {old.strip()!r}")
        (self.root / MODULE).write_text(text.replace(old, new))

    def diff(self) -> str:
        """The working-tree diff against the tree as handed over (git diff's shape)."""
        return "".join(difflib.unified_diff(
            self.baseline.splitlines(keepends=True), self.read().splitlines(keepends=True),
            f"a/{MODULE}", f"b/{MODULE}"))

    def grep(self, pattern: str) -> str:
        """``grep -rn PATTERN src`` as the agent's tool would print it."""
        hits = []
        for path in sorted((self.root / "src").rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if pattern in line:
                    hits.append(f"{path.relative_to(self.root)}:{number}:{line}")
        return "\n".join(hits)

    def run_python(self, code: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code], cwd=self.root, env=self._env(),
                              capture_output=True, text=True)

    def pytest(self) -> subprocess.CompletedProcess:
        """The sdist's own tests of the module, against the working tree's source."""
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--tb=short",
             "-rf", TESTS], cwd=self.root, env=self._env(), capture_output=True, text=True)

    def _env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(self.root / "src"), "PYTHONDONTWRITEBYTECODE": "1"}


def run_loop(workdir: Path, db: str | None = None, echo=print) -> tuple[list[DecisionRecord], str]:
    """Run the six decisions; returns their records and the store's URL or path."""
    workdir = Path(workdir)
    tree = WorkingTree(fetch_sdist(workdir), workdir / "tree")
    recon = workdir / "recon.db"
    if recon.exists():
        recon.unlink()
    index_repository(tree.root, recon)
    if db is None:  # a store of this run alone; one given is added to, as a new run
        db = str(workdir / "harness.db")
        for leftover in Path(db).parent.glob("harness.db*"):
            leftover.unlink()
    run_id = f"{RUN_ID}-{uuid.uuid4().hex[:8]}"
    records: list[DecisionRecord] = []
    events: list[tuple[str, str, int, str]] = []  # (kind, text, arrived in, command)

    with ContextStore.open(db, recon=recon, strict=True) as store:

        def decide(seq, decision_type, obligation, *, target=None, ceiling=None,
                   validation=(), build=lambda b: b):
            builder = RequestBuilder(run_id, INSTANCE_ID, seq, decision_type, TASK, obligation,
                                     store=store, target_entity=target,
                                     required_validation=tuple(validation),
                                     token_ceiling=ceiling)
            for kind, text, arrived, command in events:
                builder.event(kind, text, decision_seq=arrived, command=command)
            if tree.read() != tree.baseline:
                builder.diff(tree.diff())
            context = store.construct(build(builder).build())
            record = DecisionRecord(seq, decision_type, context.decision_id, context.token_count,
                                    context.ceiling, dict(context.verdicts))
            if records:
                change = store.diff(records[-1].decision_id, context.decision_id)
                record.entered = [fact for fact, _ in change.entered]
                record.left = [fact for fact, _ in change.left]
                record.rewritten = [fact for fact, _, _ in change.rewritten]
            records.append(record)
            echo(f"decision {seq} {decision_type:<8} {context.token_count:>5} / {context.ceiling}"
                 f" tokens  {_verdict_line(context.verdicts)}")
            for label, facts in (("+", record.entered), ("-", record.left),
                                 ("*", record.rewritten)):
                for fact in facts:
                    echo(f"    {label} {fact}")
            return context

        def run_tests(seq) -> bool:
            result = tree.pytest()
            events.append(("test_output", result.stdout + result.stderr, seq, PYTEST_COMMAND))
            passed = result.returncode == 0
            records[-1].tests_passed = passed
            return passed

        # 1 localize: what the retriever and a grep find
        candidates = store.retrieve(TASK, limit=10)
        grep = tree.grep("class CaseInsensitiveDict")
        events.append(("tool_output", f"$ {GREP_COMMAND}\n{grep}", 1, GREP_COMMAND))

        def localize(builder):
            for line in grep.splitlines():
                builder.grep_hit(line)
            for candidate in candidates.symbols:
                builder.evidence(_retrieved(candidate))
            return builder

        decide(1, "localize", "Find the code that makes CaseInsensitiveDict lookups case-sensitive",
               build=localize)

        # 2 read the class; run the reproducer
        reproducer = tree.run_python(REPRODUCER)
        events.append(("traceback", reproducer.stderr, 2, REPRODUCER_COMMAND))
        decide(2, "other", "Read CaseInsensitiveDict and reproduce the KeyError", target=CLASS)

        # 3 edit the traceback's innermost frame — the wrong site
        decide(3, "edit", "Make CaseInsensitiveDict lookups case-insensitive",
               target=f"{CLASS}.__getitem__", validation=(TESTS,))
        tree.replace(GETITEM, WRONG_GETITEM)
        index_repository(tree.root, recon)
        run_tests(3)

        # 4 repair, with what pytest now says, under a tight ceiling
        decide(4, "repair", "Fix the remaining failures of tests/test_structures.py",
               target=f"{CLASS}.__getitem__", validation=(TESTS,), ceiling=REPAIR_CEILING)

        # 5 edit the real site: keys are stored unlowered; revert the lookup
        decide(5, "edit", "Store keys lowered in __setitem__ and revert __getitem__",
               target=f"{CLASS}.__setitem__", validation=(TESTS,))
        tree.replace(WRONG_GETITEM, GETITEM)
        tree.replace(PLANTED_SETITEM, CORRECT_SETITEM)
        index_repository(tree.root, recon)
        run_tests(5)

        # 6 confirm against the passing run and the reproducer's re-run
        rerun = tree.run_python(REPRODUCER)
        events.append(("tool_output" if rerun.returncode == 0 else "traceback",
                       rerun.stdout + rerun.stderr, 6, REPRODUCER_COMMAND))
        decide(6, "other", "Confirm tests/test_structures.py passes and summarise the fix",
               target=f"{CLASS}.__setitem__", validation=(TESTS,))
    return records, db


def _retrieved(candidate):
    from ctxdb import EvidenceInput

    signals = ", ".join(f"{name} #{rank}" for name, rank in sorted(candidate.signals.items()))
    return EvidenceInput(source="04", kind="retrieved_hit", entity=candidate.entity_key,
                         score=round(candidate.score, 6),
                         provenance=f"04: ctxdb retrieve ({signals})")


def _verdict_line(verdicts: dict[str, int]) -> str:
    return ", ".join(f"{verdict} {count}" for verdict, count in sorted(verdicts.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", help="where the sdist, the tree, recon.db and the store go"
                        " (default: a temporary directory, removed afterwards)")
    parser.add_argument("--db", help="the store (default: harness.db in the workdir)")
    args = parser.parse_args(argv)
    if args.workdir:
        records, db = run_loop(Path(args.workdir), args.db)
    else:
        with tempfile.TemporaryDirectory(prefix="ctxdb-harness-") as workdir:
            records, db = run_loop(Path(workdir), args.db)
    passed = records[-2].tests_passed
    print(f"decisions={len(records)} tests_pass_after_repair={passed} store={db}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
