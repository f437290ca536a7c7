"""A fix that spans several symbols (issue 23, item 2): the plan node names each change
site, and the window shows each one's changed lines — the function around a nested
target cut around its own change, not around the nested function's again."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import text

from ctxdb import ContextStore, load_settings
from ctxdb.pipeline.assemble import ResolvedEntity, assemble_pool
from ctxdb.pipeline.compress import (
    COMPRESSED_TARGET_BYTES,
    SITE_SLICES_MAX,
    compress,
    own_change_sites,
)
from ctxdb.pipeline.state import (
    Candidate,
    ChangeSite,
    PoolItem,
    begin_attempt,
    decision_input,
    normalised_request,
)
from ctxdb.recon import index_repository
from ctxdb.request import DecisionRequest

MODULE = "pkg/series.py"
OUTER = f"{MODULE}::render_sum"
INNER = f"{MODULE}::render_sum.pad_term"
INNER_CHANGE = "        width = len(term) + 1  # the nested function's change"
OUTER_CHANGE = "    total = sum(pad_term(t) for t in terms)  # the enclosing function's change"
# enough statements that each function is well over the 1 KB compression target
INNER_PADDING, OUTER_PADDING = 30, 30


def _padding(indent: str, prefix: str, count: int) -> list[str]:
    return [f"{indent}{prefix}_{n} = len(str({n})) * {n}  # a line of the body"
            for n in range(count)]


def _module() -> tuple[str, int, int]:
    """The module's source, and the lines of the nested and of the enclosing change."""
    lines = ["def render_sum(terms, value):", '    """Render a sum of terms."""',
             "    def pad_term(term):"]
    lines += _padding("        ", "inner_before", INNER_PADDING)
    lines.append(INNER_CHANGE)
    inner_line = len(lines)
    lines += _padding("        ", "inner_after", INNER_PADDING)
    lines.append("        return width")
    lines += _padding("    ", "outer_before", OUTER_PADDING)
    lines.append(OUTER_CHANGE)
    outer_line = len(lines)
    lines += _padding("    ", "outer_after", OUTER_PADDING)
    lines.append("    return total")
    return "\n".join(lines) + "\n", inner_line, outer_line


@pytest.fixture
def indexed(tmp_path: Path, recon_target: str) -> tuple[str, int, int]:
    """The module indexed by recon (on each backend), and its two changed lines."""
    source, inner_line, outer_line = _module()
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / MODULE).write_text(source)
    index_repository(repo, recon_target)
    return recon_target, inner_line, outer_line


def _request(inner_line: int, change_sites: list[dict]) -> dict:
    node = {"node_id": "edit", "obligation": "Pad each term and sum them",
            "target_entity": INNER, "dependencies": [OUTER],
            "insertion_point": {"path": MODULE, "line": inner_line}}
    if change_sites:
        node["change_sites"] = change_sites
    return {"run_id": "r", "instance_id": "two-symbols", "seq": 1, "decision_type": "edit",
            "task": "The sum is one short.", "plan_node": node,
            "evidence": [
                {"source": "05", "kind": "fault_entity", "entity": INNER, "provenance": "05"},
                {"source": "05", "kind": "changed_entity", "entity": OUTER,
                 "provenance": "05: another location of the change"}]}


def _window_of(store_url: str, recon: str, request: dict) -> dict[str, tuple]:
    """Entity key -> (shown lines, text) of the window's items."""
    with ContextStore.open(store_url, recon=recon) as store:
        context = store.construct(request)
        with store.engine.connect() as connection:
            keys = dict(connection.execute(
                text("SELECT item_id, entity_key FROM evidence_item "
                     "WHERE decision_id = :decision_id"),
                {"decision_id": context.decision_id}).all())
    return {keys[entry.item_id]: (entry.shown_lines, entry.text) for entry in context.window}


def test_the_window_shows_both_changed_spans(indexed, store_url):
    recon, inner_line, outer_line = indexed
    window = _window_of(store_url, recon, _request(
        inner_line, [{"path": MODULE, "line": outer_line}]))
    (inner_first, inner_last), inner_text = window[INNER]
    (outer_first, outer_last), outer_text = window[OUTER]
    assert inner_first <= inner_line <= inner_last and INNER_CHANGE in inner_text
    # the enclosing function is cut around its own change, not the nested one's again
    assert outer_first <= outer_line <= outer_last and OUTER_CHANGE in outer_text
    assert INNER_CHANGE not in outer_text
    assert len(outer_text.encode()) < 2 * COMPRESSED_TARGET_BYTES


def test_a_request_naming_one_site_cuts_as_before(indexed, store_url):
    """No change sites: the enclosing function is sliced around the insertion point."""
    recon, inner_line, outer_line = indexed
    window = _window_of(store_url, recon, _request(inner_line, []))
    (outer_first, outer_last), outer_text = window[OUTER]
    assert outer_first <= inner_line <= outer_last and INNER_CHANGE in outer_text
    assert OUTER_CHANGE not in outer_text


def test_one_body_with_two_change_sites_keeps_two_spans():
    """Two sites far apart in one long body, no smaller item holding either: two slices
    under the signature, the lines between them marked as not shown."""
    source, inner_line, outer_line = _module()
    request = DecisionRequest.from_dict(_request(inner_line,
                                                 [{"path": MODULE, "line": outer_line}]))
    normalised = normalised_request(request, request.to_json(), "0" * 64, load_settings())
    item = PoolItem(item_no=1, source="05", kind="changed_entity", content=source,
                    provenance="05", entity_key=OUTER, path=MODULE, start_line=1,
                    end_line=source.count("\n"), signature="def render_sum(terms, value):")
    candidate = Candidate(item, "obligation:obligation_dependency", role="change_target",
                          rendering="verbatim", text=source)
    attempt = begin_attempt(decision_input(normalised, [item]), None)
    attempt.candidates = [candidate]
    compress(attempt)
    assert INNER_CHANGE in candidate.text and OUTER_CHANGE in candidate.text
    assert "not shown" in candidate.text and len(candidate.text) < len(source) // 2
    first, last = candidate.shown_lines  # the window item records the first site's span
    assert first <= inner_line <= last < outer_line
    (event,) = attempt.audit.events
    assert event.action == "ast_slice"
    assert re.fullmatch(r"lines \d+-\d+, \d+-\d+", event.driver)


def _compressed(insertion: dict, sites: list[dict], source: str | None = None,
                signature: str = "def render_sum(terms, value):",
                role: str = "change_target") -> tuple[Candidate, list]:
    """The enclosing function (or ``source``) alone, compressed under a request with this
    insertion point and these change sites."""
    source = source if source is not None else _module()[0]
    request = _request(0, sites)
    request["plan_node"]["insertion_point"] = insertion
    parsed = DecisionRequest.from_dict(request)
    normalised = normalised_request(parsed, parsed.to_json(), "0" * 64,
                                    load_settings())
    item = PoolItem(item_no=1, source="05", kind="changed_entity", content=source,
                    provenance="05", entity_key=OUTER, path=MODULE, start_line=1,
                    end_line=source.count("\n"), signature=signature)
    candidate = Candidate(item, "obligation:obligation_dependency", role=role,
                          rendering="verbatim", text=source)
    attempt = begin_attempt(decision_input(normalised, [item]), None)
    attempt.candidates = [candidate]
    compress(attempt)
    return candidate, attempt.audit.events


def test_a_site_across_sibling_statements_gets_its_lines_the_insertion_point_stays_whole():
    """No one statement under 1 KB holds two sibling lines: a change site is shown by its
    own lines and those around them; an insertion point so keeps the whole target, as it
    did before change sites."""
    source, _, outer_line = _module()
    siblings = {"path": MODULE, "line": outer_line - 1, "end_line": outer_line}
    elsewhere = {"path": "pkg/other.py", "line": 1}
    candidate, events = _compressed(elsewhere, [siblings])
    first, last = candidate.shown_lines
    assert first <= outer_line - 1 and outer_line <= last and OUTER_CHANGE in candidate.text
    assert [e.action for e in events] == ["site_slice"]
    assert "# … slice: lines" in candidate.text and len(candidate.text) < len(source) // 2

    whole, events = _compressed(siblings, [])
    assert whole.text == source and whole.over_compress_target
    assert [e.action for e in events] == ["flagged_over_1kb"]


ELSEWHERE = {"path": "pkg/other.py", "line": 1}


def _site(line: int, end_line: int | None = None) -> dict:
    return {"path": MODULE, "line": line, **({"end_line": end_line} if end_line else {})}


def _block(name: str, lines: int) -> list[str]:
    """An `if` statement of ``lines`` lines, about 85 bytes each."""
    return [f"    if {name}:"] + [f"        {name}_{n} = len(str({n})) * {n}  # a line of the block"
                                  f" {'x' * 20}" for n in range(lines - 1)]


def _two_blocks(gap: int, tail: int) -> tuple[str, tuple[int, int], tuple[int, int]]:
    """A function holding two 10-line statements, each over half the 1 KB target and
    under all of it, ``gap`` lines apart and ``tail`` lines before its end; the source
    and each statement's first and last line."""
    lines = ["def render_sum(terms, value):"]
    first = (len(lines) + 1, len(lines) + 10)
    lines += _block("first", 10) + _padding("    ", "between", gap)
    second = (len(lines) + 1, len(lines) + 10)
    lines += _block("second", 10) + _padding("    ", "tail", tail)
    return "\n".join(lines) + "\n", first, second


def _shown_bytes(text: str) -> int:
    """Bytes of the file lines a sliced text shows (its signature and marks left out)."""
    return sum(len(line.encode()) + 1 for line in text.split("\n")[2:]
               if not line.lstrip().startswith("# …"))


def test_two_sites_whose_slices_merge_over_the_target_are_flagged_and_audited():
    """Each statement misses its half of the 1 KB and takes all of it: the two touching
    slices merge into one over 1 KB, flagged for the budgeter, with its audit event."""
    source, first, second = _two_blocks(0, 40)
    candidate, events = _compressed(ELSEWHERE, [_site(*first), _site(*second)], source)
    assert candidate.shown_lines == (first[0], second[1])
    assert _shown_bytes(candidate.text) > COMPRESSED_TARGET_BYTES
    assert candidate.over_compress_target
    assert [e.action for e in events] == ["ast_slice", "flagged_over_1kb"]
    # the one slice's header names both sites, not the first alone
    assert f"around the edits at lines {first[0]}, {second[0]}" in candidate.text


def test_several_slices_over_the_target_are_flagged_and_audited():
    source, first, second = _two_blocks(20, 40)
    candidate, events = _compressed(ELSEWHERE, [_site(*first), _site(*second)], source)
    assert "not shown" in candidate.text and candidate.over_compress_target
    assert [e.action for e in events] == ["ast_slice", "flagged_over_1kb"]
    assert events[0].driver == f"lines {first[0]}-{first[1]}, {second[0]}-{second[1]}"


def test_slices_no_smaller_than_the_target_keep_it_whole():
    """Two sites whose statements fill the body: the slices plus their header would
    outweigh it, so the whole target is shown, flagged."""
    source, first, second = _two_blocks(0, 0)
    candidate, events = _compressed(ELSEWHERE, [_site(*first), _site(*second)], source)
    assert candidate.text == source and candidate.over_compress_target
    assert [e.action for e in events] == ["flagged_over_1kb"]


def test_many_sites_never_make_a_target_bigger():
    """A site on every other line of an 8 KB function: the slices are capped, the short
    gaps between them shown rather than marked, the header bounded."""
    lines = ["def many(values):"] + [f"    v_{n} = {n}" for n in range(600)]
    source = "\n".join(lines) + "\n"
    sites = [_site(line) for line in range(2, len(lines) + 1, 2)]
    candidate, _ = _compressed(ELSEWHERE, sites, source, signature="def many(values):")
    assert len(candidate.text.encode()) < len(source.encode()) // 2
    assert "not shown" not in candidate.text  # each one-line gap is shorter than its mark
    header = candidate.text.split("\n")[1]
    assert f"(and {len(sites) - SITE_SLICES_MAX} more, not sliced)" in header
    assert header.count(",") < 2 * SITE_SLICES_MAX


def test_a_body_is_parsed_once_however_many_sites(monkeypatch):
    from ctxdb.pipeline import compress as compress_module

    parser = compress_module._python_parser()
    parses = []

    class CountingParser:
        def parse(self, source: bytes):
            parses.append(source)
            return parser.parse(source)

    monkeypatch.setattr(compress_module, "_python_parser", lambda: CountingParser())
    source, _, outer_line = _module()
    sites = [_site(outer_line - n) for n in range(8)] * 128  # the request's limit, 1,024
    _compressed(ELSEWHERE, sites, source)
    assert len(parses) == 1


def test_overlapping_sites_give_one_slice_and_name_each_line_once():
    source, inner_line, outer_line = _module()
    candidate, events = _compressed(
        ELSEWHERE, [_site(inner_line), _site(outer_line), _site(outer_line, outer_line + 1)])
    header = candidate.text.split("\n")[1]
    assert header.endswith(f"around the edits at lines {inner_line}, {outer_line}")
    assert events[0].driver.count(",") == 1  # two spans: the overlapping sites' merged


def test_a_site_outside_the_item_in_its_file_is_ignored():
    source, _, outer_line = _module()
    alone, _ = _compressed(ELSEWHERE, [_site(outer_line)])
    beyond = source.count("\n") + 10
    with_outside, _ = _compressed(ELSEWHERE, [_site(outer_line), _site(beyond)])
    assert with_outside.text == alone.text and with_outside.shown_lines == alone.shown_lines


def test_a_slice_from_the_def_line_shows_it_once():
    candidate, _ = _compressed(ELSEWHERE, [_site(1)])
    assert candidate.text.count("def render_sum(terms, value):") == 1


def test_a_large_related_symbol_does_not_hide_a_site_from_its_target():
    """Under all_verbatim a nested related symbol may be verbatim and over 1 KB: it is
    cut by the decision's terms, so the target around it still slices its site."""
    source, inner_line, outer_line = _module()
    lines = source.split("\n")
    inner_end = lines.index("        return width") + 1
    inner_text = "\n".join(lines[2:inner_end])

    def candidate(key: str, first: int, last: int, text: str, role: str) -> Candidate:
        item = PoolItem(item_no=first, source="05", kind="changed_entity", content=text,
                        provenance="05", entity_key=key, path=MODULE, start_line=first,
                        end_line=last)
        return Candidate(item, "rank:admitted", role=role, rendering="verbatim", text=text)

    outer = candidate(OUTER, 1, source.count("\n"), source, "change_target")
    inner = candidate(INNER, 3, inner_end, inner_text, "related_symbol")
    assert len(inner_text.encode()) > COMPRESSED_TARGET_BYTES
    sites = (ChangeSite(MODULE, inner_line, inner_line), ChangeSite(MODULE, outer_line, outer_line))
    assert own_change_sites(outer, sites, [outer, inner]) == sites
    inner.role = "change_target"  # a nested target shows its own site
    assert own_change_sites(outer, sites, [outer, inner]) == sites[1:]


BIG_PATH = "pkg/big.py"
BIG_KEY = f"{BIG_PATH}::big"
BIG_LINES = 700


class _BigRecon:
    """One 700-line function, well over the 8 KB pool cap."""

    source = "def big():\n" + "".join(f"    value_{n} = compute_{n}(items)  # {'x' * 20}\n"
                                      for n in range(BIG_LINES - 1))

    def resolve(self, ref):
        if ref.key != BIG_KEY:
            return None
        return ResolvedEntity(BIG_PATH, 1, BIG_LINES, self.source, "def big():")


def _big_item(point_line: int, site_lines: list[int]) -> PoolItem:
    request = DecisionRequest.from_dict({
        "run_id": "r", "instance_id": "big", "seq": 1, "decision_type": "edit",
        "task": "t", "plan_node": {
            "node_id": "edit", "obligation": "Fix big", "target_entity": BIG_KEY,
            "insertion_point": {"path": BIG_PATH, "line": point_line},
            **({"change_sites": [{"path": BIG_PATH, "line": line} for line in site_lines]}
               if site_lines else {})},
        "evidence": [{"source": "05", "kind": "fault_entity", "entity": BIG_KEY,
                      "provenance": "05"}]})
    (item,) = [item for item in assemble_pool(request, _BigRecon())
               if item.kind == "fault_entity"]
    assert item.original_content == _BigRecon.source  # the 8 KB cut was made
    return item


def test_a_site_far_from_the_insertion_point_never_pushes_it_out_of_the_8kb_cut():
    alone = _big_item(600, [])
    with_site = _big_item(600, [10])
    assert (with_site.start_line, with_site.end_line) == (alone.start_line, alone.end_line)
    assert with_site.start_line <= 600 <= with_site.end_line
    assert "around the insertion point" in with_site.content


def test_a_site_near_the_insertion_point_is_kept_with_it_in_the_8kb_cut():
    item = _big_item(600, [10, 560])
    assert item.start_line <= 560 and 600 <= item.end_line and item.start_line > 10
    assert "around the change sites" in item.content
