"""Reading decisions back: ``ctxdb show`` prints the window exactly as it was sent."""

from __future__ import annotations

from dataclasses import replace

import pytest
from requests_data import edit_request

from ctxdb import ContextStore, load_settings
from ctxdb.cli import EXIT_OK, main
from ctxdb.forensics import rendered_window

LONG_TASK = "Fix the discount. " + " ".join(f"word{n}" for n in range(2000))

# (name, token ceiling, request changes): a window that fits, a task the budgeter cut
# (more than once: each cut is re-measured), and a task cut to nothing with the rest
# of the stable core halved after it.
CASES = [
    ("fits", 24_000, {}),
    ("task_cut", 256, {"task": LONG_TASK}),
    ("task_cut_to_nothing", 256, {"task": "Fix the discount. " + "word " * 40,
                                  "obligation": "Apply the discount " + "before tax " * 150}),
]


def _construct(url, ceiling, changes):
    request = edit_request(**{k: v for k, v in changes.items() if k != "obligation"})
    if "obligation" in changes:
        request["plan_node"]["obligation"] = changes["obligation"]
    settings = replace(load_settings(), token_ceiling=ceiling)
    with ContextStore.open(url, settings=settings) as store:
        return store.construct(request)


@pytest.mark.parametrize("name, ceiling, changes", CASES, ids=[c[0] for c in CASES])
def test_show_prints_the_window_as_sent(store_url, capsys, name, ceiling, changes):
    context = _construct(store_url, ceiling, changes)
    expected_flags = {"fits": set(), "task_cut": {"task_truncated"},
                      "task_cut_to_nothing": {"task_truncated", "stable_core_truncated"}}[name]
    assert expected_flags <= set(context.flags)
    if name == "task_cut":
        assert context.task.startswith("Fix the discount. word0") and len(context.task) < 1000
    if name == "task_cut_to_nothing":
        assert context.task == ""

    with ContextStore.open(store_url) as store, store.engine.connect() as connection:
        assert rendered_window(connection, context.decision_id) == context.render()
    assert main(["show", str(context.decision_id), "--db", store_url]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.split("─" * 72 + "\n", 1)[1] == context.render()
