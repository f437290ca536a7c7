"""Live state ages (issue 12 item 4): one order across kinds, newer failures supersede
older ones of the same test or site, old tool output is masked to its pointer — on
SQLite and PostgreSQL."""

from __future__ import annotations

from requests_data import edit_request
from sqlalchemy import text

from ctxdb import ContextStore
from ctxdb.pipeline.aging import Observation, failure_marks, marks_meet, stale_arrivals
from ctxdb.pipeline.render import TOOL_OUTPUT_MAX_AGE_DECISIONS
from ctxdb.request import MIN_TOKEN_CEILING

SITE_TRACEBACK = ('Traceback (most recent call last):\n'
                  '  File "shop/cart.py", line 12, in total\n    return sum(...)\n'
                  'TypeError: unsupported operand\n')
OTHER_SITE = ('Traceback (most recent call last):\n'
              '  File "shop/report.py", line 3, in render_report\nKeyError: "x"\n')

def _query(store, statement, params=None):
    """Rows of one query, on a connection closed at once (a connection left to the
    garbage collector is closed at an arbitrary moment of a later test)."""
    with store.engine.connect() as connection:
        return connection.execute(statement, params or {}).all()



def _request(events, seq=5, **changes):
    request = edit_request(seq=seq, **changes)
    request["live"] = {"events": events}
    return request


def _fates(store, decision_id):
    rows = _query(store, text(
        "SELECT e.provenance, v.verdict, v.driver FROM v_item_verdict v"
        " JOIN evidence_item e ON e.decision_id = v.decision_id AND e.item_id = v.item_id"
        " WHERE v.decision_id = :d AND e.source = 'live' ORDER BY e.item_no"),
        {"d": decision_id})
    return [(p.split("(", 1)[1].rstrip(")"), verdict, driver) for p, verdict, driver in rows]


def test_what_names_a_failure():
    assert failure_marks(SITE_TRACEBACK) == {"shop/cart.py:12"}
    assert failure_marks("FAILED tests/t.py::test_a - assert 1\nt.py:4: AssertionError") == {
        "tests/t.py::test_a", "t.py:4"}
    assert failure_marks("some words") == frozenset()


def test_a_newer_failure_at_the_same_site_or_of_the_same_test_supersedes(store_url):
    events = [
        {"kind": "traceback", "text": SITE_TRACEBACK, "decision_seq": 2},
        {"kind": "error", "text": "FAILED tests/test_cart.py::test_total - boom",
         "decision_seq": 2},
        {"kind": "traceback", "text": OTHER_SITE, "decision_seq": 3},
        {"kind": "test_output", "text": "FAILED tests/test_cart.py::test_total - again\n"
                                        + SITE_TRACEBACK, "decision_seq": 4},
    ]
    with ContextStore.open(store_url) as store:
        context = store.construct(_request(events))
        assert store.verify() == {}
        fates = _fates(store, context.decision_id)
    assert fates == [
        ("traceback, from decision 2", "rejected", "stale: omitted (§3.3, P6)"),
        ("error, from decision 2", "rejected", "stale: omitted (§3.3, P6)"),
        ("traceback, from decision 3", "in_window", "obligation:live_state"),  # another site
        ("test_output, from decision 4", "in_window", "obligation:live_state"),
    ]


def test_the_lists_of_unknown_order_across_kinds_supersede_only_within_a_stream(store_url):
    """Without live.events, which failure is newer across kinds is not known: an error
    and a traceback naming the same test both stay."""
    request = edit_request(seq=2)
    request["live"] = {"errors": ["tests/test_cart.py::test_total failed"],
                       "tracebacks": ["FAILED tests/test_cart.py::test_total\n" + SITE_TRACEBACK]}
    with ContextStore.open(store_url) as store:
        context = store.construct(request)
        verdicts = _query(store, text(
            "SELECT v.verdict FROM v_item_verdict v JOIN evidence_item e"
            " ON e.decision_id = v.decision_id AND e.item_id = v.item_id"
            " WHERE v.decision_id = :d AND e.source = 'live'"), {"d": context.decision_id})
    assert [row[0] for row in verdicts] == ["in_window", "in_window"]


def test_old_tool_output_is_masked_to_its_pointer(store_url):
    seq = 6
    events = [
        {"kind": "tool_output", "text": "$ grep -n total\nshop/cart.py:12: ...",
         "decision_seq": seq - TOOL_OUTPUT_MAX_AGE_DECISIONS - 1},
        {"kind": "tool_output", "text": "$ ls shop\ncart.py", "decision_seq":
         seq - TOOL_OUTPUT_MAX_AGE_DECISIONS},
    ]
    with ContextStore.open(store_url) as store:
        context = store.construct(_request(events, seq=seq))
        assert store.verify() == {}
        fates = _fates(store, context.decision_id)
        old = next(e for e in context.window if "grep" not in e.text and "masked" in e.text)
        assert store.show(context.decision_id, old.item_id).startswith("$ grep -n total")
    assert [verdict for _, verdict, _ in fates] == ["masked", "in_window"]
    assert "$ ls shop" in context.render() and "$ grep -n total" not in context.render()


def test_events_keep_the_harness_order_across_kinds(store_url):
    events = [{"kind": "test_output", "text": "1 failed", "decision_seq": 1},
              {"kind": "tool_output", "text": "$ cat x", "decision_seq": 2},
              {"kind": "error", "text": "NameError: y", "decision_seq": 3}]
    with ContextStore.open(store_url) as store:
        context = store.construct(_request(events))
        arrivals = _query(store, text(
            "SELECT kind, arrival_no FROM evidence_item WHERE decision_id = :d"
            " AND source = 'live' ORDER BY arrival_no"), {"d": context.decision_id})
    assert [kind for kind, _ in arrivals] == ["test_output", "tool_output", "error"]


def test_a_script_traceback_meets_pytest_frame_of_the_same_line():
    """An absolute path in a script's traceback and pytest's path relative to where it ran
    name the same site when the line is the same and one path ends with the other."""
    script = SITE_TRACEBACK.replace('"shop/cart.py"', '"/home/dev/repo/shop/cart.py"')
    pytest_frame = "shop/cart.py:12: in total\nE   TypeError"
    assert marks_meet(failure_marks(script), failure_marks(pytest_frame))
    assert not marks_meet(failure_marks(script), failure_marks("shop/cart.py:13: in total"))
    assert not marks_meet(failure_marks(script), failure_marks("art.py:12: in total"))


def test_a_rerun_of_the_same_command_supersedes_its_older_output(store_url):
    """A reproducer's traceback is stale once the same command has run again — even when
    the re-run printed no failure (a tool output); other commands' outputs stay."""
    events = [
        {"kind": "traceback", "text": SITE_TRACEBACK, "decision_seq": 2,
         "command": "python repro.py"},
        {"kind": "traceback", "text": OTHER_SITE, "decision_seq": 3,
         "command": "python report.py"},
        {"kind": "tool_output", "text": "ok", "decision_seq": 4, "command": "python repro.py"},
    ]
    with ContextStore.open(store_url) as store:
        context = store.construct(_request(events))
        assert store.verify() == {}
        fates = _fates(store, context.decision_id)
    assert [verdict for _, verdict, _ in fates] == ["rejected", "in_window", "in_window"]
    assert fates[0][2] == "stale: omitted (§3.3, P6)"


def test_a_failure_too_long_for_the_ceiling_is_cut_to_its_last_lines(store_url):
    """Rather than the stable core alone, the freshest failure keeps the last lines that
    fit (pytest's summary, a traceback's exception), with a pointer to the whole."""
    run = "".join(f"tests/test_cart.py:{n}: in test_{n}\n    assert total() == {n}\n"
                  for n in range(1, 400))
    run += "FAILED tests/test_cart.py::test_total - AssertionError\n1 failed in 0.1s\n"
    request = _request([{"kind": "test_output", "text": run, "decision_seq": 5}],
                       token_ceiling=MIN_TOKEN_CEILING * 4)
    with ContextStore.open(store_url) as store:
        context = store.construct(request)
        steps = _query(store, text("SELECT ladder_step FROM budget_log WHERE decision_id = :d"),
                       {"d": context.decision_id})
    window = context.render()
    assert context.token_count <= context.ceiling
    assert "2e_cut_freshest_failure" in [row[0] for row in steps]
    # before the stable core's acceptance detail is touched (spec §3.7: its trim is last)
    assert not [row[0] for row in steps if row[0].startswith("3_")]
    assert "stable_core_only" not in context.flags
    assert "cut to its last lines to fit the budget" in window
    assert "1 failed in 0.1s" in window
    assert "test_1\n" not in window  # its first lines are what gave way


def test_a_failure_of_one_long_line_keeps_its_end(store_url):
    """Neither the 8 KB pool cut nor the ladder loses a failure whose last line is longer
    than what fits: its end stays (where the exception's message is)."""
    message = "ValueError: " + "x" * 20_000 + " the end\n"
    request = _request([{"kind": "error", "text": message, "decision_seq": 5}],
                       token_ceiling=MIN_TOKEN_CEILING * 4)
    with ContextStore.open(store_url) as store:
        context = store.construct(request)
    assert "the end" in context.render()
    assert "stable_core_only" not in context.flags


def test_the_pool_cut_of_a_failure_keeps_its_last_line_whole_or_its_end():
    from ctxdb.pipeline.assemble import cap_content
    from ctxdb.spec import CONTENT_MAX_BYTES

    lines = "".join(f"frame {n}\n" for n in range(3000)) + "KeyError: 'accept'\n"
    cut, was_cut = cap_content(lines, keep_tail=True)
    assert was_cut and cut.endswith("KeyError: 'accept'\n")
    assert cut.startswith("[ctxdb: content cut")
    assert len(cut.encode("utf-8")) <= CONTENT_MAX_BYTES
    assert cut.split("\n")[1].startswith("frame ")  # from a whole line
    one_line, _ = cap_content("é" * 10_000 + " the end\n", keep_tail=True)
    assert one_line.endswith(" the end\n") and len(one_line.encode("utf-8")) <= CONTENT_MAX_BYTES


def test_one_runs_outputs_stand_together_and_commands_are_streams():
    """A run reported as a test output and a traceback in one decision: neither
    supersedes the other; test outputs of different commands are different streams."""
    def seen(arrival, kind, command, seq, text="x"):
        return Observation(arrival, kind, text, True, seq, command)

    one_run = [seen(1, "test_output", "pytest t.py", 4, "FAILED t.py::test_a\n1 failed"),
               seen(2, "traceback", "pytest t.py", 4, 'File "t.py", line 3, in test_a')]
    assert stale_arrivals(one_run) == frozenset()
    streams = [seen(1, "test_output", "pytest a.py", 2), seen(2, "test_output", "pytest b.py", 3)]
    assert stale_arrivals(streams) == frozenset()
    rerun = [seen(1, "test_output", "pytest  a.py", 2), seen(2, "test_output", "pytest a.py", 3)]
    assert stale_arrivals(rerun) == {1}  # the same command, up to whitespace
    lists = [Observation(1, "test_output", "1 failed", False), Observation(2, "test_output",
                                                                          "ok", False)]
    assert stale_arrivals(lists) == {1}  # outputs of no command: one stream, as before
