"""A request built from what a harness actually holds (issue 12): grep hits, a file path,
the working-tree diff, pytest's output and Python tracebacks — no hand-made dicts.

    request = (RequestBuilder("run-1", "task-7", 3, "edit", task, "Fix the tax",
                              store=store, target_entity="shopcart/pricing.py::Total")
               .grep_hit("shopcart/pricing.py:64:        taxable = …")
               .diff(working_tree_patch)
               .pytest_output(failing_run)
               .build())
    context = store.construct(request)

With a ``store`` whose recon index is available, a line becomes the innermost symbol
holding it (its entity key); without one, the line span ``path:LINE-LINE``, which the
pool still reads from recon when the store has it. A traceback's or pytest's frames
inside the indexed tree become 03 source items (the frame's symbol), the text itself
live state; a diff is the live patch, and the code each hunk changes a 05 changed
entity.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .diffs import parse_unified_diff
from .request import (
    DecisionRequest,
    EvidenceInput,
    InsertionPoint,
    LiveEvent,
    LiveState,
    PlanNode,
    RequestError,
)
from .request_limits import STORE_INTEGER_MAX

if TYPE_CHECKING:
    from .store import ContextStore

# `path:LINE` or `path:LINE:matched text` (grep -n, ripgrep -n)
_GREP_HIT = re.compile(r"^(?P<path>[^:\n]+):(?P<line>[1-9]\d*)(?::(?P<text>.*))?$", re.DOTALL)
# `File "path", line N, in name` (Python) and `path:N: …` (pytest --tb=short / -rA)
_PYTHON_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+)')
_PYTEST_FRAME = re.compile(r"^(?P<path>[\w./-]+\.py):(?P<line>\d+):", re.MULTILINE)
HIT_TEXT_MAX_CHARS = 160  # how much of a grep hit's matched text the provenance keeps


@dataclass
class RequestBuilder:
    run_id: str
    instance_id: str
    seq: int
    decision_type: str
    task: str
    obligation: str
    store: ContextStore | None = None  # lines resolve to their symbols
    node_id: str | None = None
    target_entity: str | None = None
    required_validation: tuple[str, ...] = ()
    acceptance_criteria: tuple[str, ...] = ()
    decision_question: str | None = None
    insertion_point: InsertionPoint | None = None
    token_ceiling: int | None = None  # this decision's ceiling, at most the store's
    # where the harness's commands saw the indexed tree (an agent's /testbed, while recon
    # indexed a copy elsewhere): an absolute frame path under it is a path of the tree
    workdir: str | None = None
    _evidence: list[EvidenceInput] = field(default_factory=list)
    _live: dict[str, list[str]] = field(default_factory=dict)
    _patch: str | None = None
    _events: list[LiveEvent] = field(default_factory=list)
    _seen: set[tuple[str, str]] = field(default_factory=set)

    # --- what a harness holds -------------------------------------------------------------

    def evidence(self, item: EvidenceInput) -> RequestBuilder:
        self._evidence.append(item)
        return self

    def file(self, path: str) -> RequestBuilder:
        """A plain file path: the module, read from recon."""
        return self._add("03", "source_code", path, f"03: file {path}")

    def grep_hit(self, hit: str) -> RequestBuilder:
        """``path:LINE`` or ``path:LINE:text``: the symbol holding the line, as a hit."""
        match = _GREP_HIT.match(hit.rstrip("\n"))
        if match is None:
            raise RequestError(f"grep hit {hit[:80]!r}: expected path:LINE or path:LINE:text")
        if not _line_in_range(match["line"]):
            raise RequestError(f"grep hit {hit[:80]!r}: expected a line from 1 to "
                               f"{STORE_INTEGER_MAX}")
        path, line = match["path"], int(match["line"])
        text = (match["text"] or "").strip()[:HIT_TEXT_MAX_CHARS]
        provenance = f"04: grep hit {path}:{line}" + (f" {text}" if text else "")
        return self._add("04", "retrieved_hit", self._entity_at(path, line, line), provenance)

    def diff(self, patch: str) -> RequestBuilder:
        """The working-tree diff: the live patch, and what each hunk changes as a 05
        changed entity — its lines on the new side (the working tree recon indexes): the
        added lines, and where deleted ones were."""
        self._patch = patch
        for change in parse_unified_diff(patch):
            if change.new_path is None:  # a deleted file: nothing of it is left to show
                continue
            path = change.new_path
            lines = change.added_new_lines + change.deleted_at_new_lines
            for first, last in _runs(lines):
                self._add("05", "changed_entity", self._entity_at(path, first, last),
                          f"05: changed by the working-tree diff ({path}:{first}-{last})")
        return self

    def traceback(self, text: str) -> RequestBuilder:
        """A Python traceback: live state, and its frames' symbols in the indexed tree."""
        self._live.setdefault("tracebacks", []).append(text)
        return self._frames(text, "traceback")

    def pytest_output(self, text: str) -> RequestBuilder:
        """pytest's output: the live test output, and the frames it prints."""
        self._live.setdefault("test_outputs", []).append(text)
        return self._frames(text, "pytest output")

    def error(self, text: str) -> RequestBuilder:
        self._live.setdefault("errors", []).append(text)
        return self

    def tool_output(self, text: str) -> RequestBuilder:
        self._live.setdefault("tool_outputs", []).append(text)
        return self

    def event(self, kind: str, text: str, decision_seq: int | None = None,
              command: str | None = None) -> RequestBuilder:
        """An observation in the harness's order across kinds, with the decision it
        arrived in and what produced it (live.events: what lets live state age — a newer
        output of the same command supersedes an older one)."""
        self._events.append(LiveEvent(kind, text, decision_seq, command))
        if kind in ("traceback", "test_output"):
            self._frames(text, kind.replace("_", " "))
        return self

    def build(self) -> DecisionRequest:
        evidence = self._evidence
        if (self.target_entity and not any(item.entity == self.target_entity for item in evidence)
                and self._resolves(self.target_entity)):
            # the code the plan node says to change, first: a harness names the target and
            # expects to see it, not to add it again by hand (only when recon has it: an
            # item the harness never added must not be what a strict store refuses)
            evidence = [EvidenceInput(source="03", kind="source_code", entity=self.target_entity,
                                      provenance="03: the plan node's target"), *evidence]
        request = DecisionRequest(
            run_id=self.run_id, instance_id=self.instance_id, seq=self.seq,
            decision_type=self.decision_type, task=self.task,
            plan_node=PlanNode(
                node_id=self.node_id or f"{self.decision_type}-{self.seq}",
                obligation=self.obligation, target_entity=self.target_entity,
                required_validation=tuple(self.required_validation),
                acceptance_criteria=tuple(self.acceptance_criteria),
                decision_question=self.decision_question, insertion_point=self.insertion_point,
            ),
            evidence=tuple(evidence),
            live=LiveState(patch=self._patch, events=tuple(self._events),
                           **{k: tuple(v) for k, v in self._live.items()}),
            token_ceiling=self.token_ceiling,
        )
        request.check()
        return request

    # --- resolving lines ------------------------------------------------------------------

    def _add(self, source: str, kind: str, entity: str, provenance: str) -> RequestBuilder:
        if (kind, entity) not in self._seen:  # the same symbol from two hits: one item
            self._seen.add((kind, entity))
            self._evidence.append(EvidenceInput(source=source, kind=kind, entity=entity,
                                                provenance=provenance[:200]))
        return self

    def _frames(self, text: str, what: str) -> RequestBuilder:
        # a frame whose line no file can have is not a frame of ours (nor storable)
        frames = [(m.start(), m["path"], int(m["line"]))
                  for pattern in (_PYTHON_FRAME, _PYTEST_FRAME) for m in pattern.finditer(text)
                  if _line_in_range(m["line"])]
        for depth, (_, path, line) in enumerate(sorted(frames, reverse=True), start=1):
            indexed = self._indexed_path(path)
            if indexed is not None:  # frames in the standard library or site-packages: not ours
                self._add("03", "source_code", self._entity_at(indexed, line, line),
                          f"03: frame {depth} (innermost 1) of the {what}: {indexed}:{line}")
        return self

    def _recon(self) -> ContextStore | None:
        store = self.store
        if store is None or not getattr(store, "recon_available", False):
            return None
        return store

    def _resolves(self, key: str) -> bool:
        store = self._recon()
        if store is None:
            return False
        from .entities import parse_entity_key
        from .recon.reader import ReconReader

        try:
            ref = parse_entity_key(key)
        except ValueError:
            return False  # build() names the malformed key
        with store.engine.connect() as connection, store.recon_connection(connection) as rc:
            return ReconReader(rc).resolve(ref) is not None

    def _entity_at(self, path: str, first: int, last: int) -> str:
        store = self._recon()
        key = store.entity_at(path, first, last) if store is not None else None
        return key or f"{path}:{first}-{last}"  # past the store's integers: check() names it

    def _indexed_path(self, path: str) -> str | None:
        """The frame's file as recon names it — an absolute path only when it lies under
        the indexed root or the harness's ``workdir``, a relative one only when recon has
        that very file; without recon, a relative path as given."""
        if self.workdir and path.startswith(self.workdir.rstrip("/") + "/"):
            path = path[len(self.workdir.rstrip("/")) + 1:]
        store = self._recon()
        if store is None:
            return None if path.startswith("/") or "site-packages" in path else path
        from .entities import relative_to_root
        from .recon.reader import ReconReader

        with store.engine.connect() as connection, store.recon_connection(connection) as rc:
            reader = ReconReader(rc)
            if path.startswith("/"):
                root = reader.root()
                relative = relative_to_root(path, root) if root else None
                if relative is None:
                    return None  # outside the indexed tree (the standard library, a venv)
                path = relative
            return path if reader.path_for(path) == path else None


def _line_in_range(digits: str) -> bool:
    """A line number the store's integer columns hold (digits counted first: Python
    refuses to convert thousands of them)."""
    return len(digits) <= len(str(STORE_INTEGER_MAX)) and 1 <= int(digits) <= STORE_INTEGER_MAX


def _runs(lines: list[int]) -> list[tuple[int, int]]:
    """Consecutive line numbers as (first, last) runs."""
    runs: list[list[int]] = []
    for line in sorted(set(lines)):
        if runs and line == runs[-1][1] + 1:
            runs[-1][1] = line
        else:
            runs.append([line, line])
    return [(first, last) for first, last in runs]
