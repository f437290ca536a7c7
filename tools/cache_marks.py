"""What a prompt cache that serves only at marks would serve of a replay's loop windows.

``python tools/cache_marks.py --db sqlite:///replay.db`` reads the ctx08 windows a replay
recorded (``ctxdb replay``) and, run by run, plays a cache that serves a prompt's start
only at the end of a content block an earlier request marked (Anthropic's
``cache_control``; looked for at most ``PROVIDER_LOOKBACK_BLOCKS`` blocks back from each
of the request's own marks), in two layouts:

- ``one message, marked at its end``: the window one user message, one mark on the last
  message (mini-swe-agent's ``set_cache_control: default_end``);
- ``ctxdb's marks``: ``ctxdb.agent.cache_marks`` (the window one block per item, marked
  after the harness's prompt, before the newest reasoning — else before the newest
  step's items — and at the end).

It prints, per layout, the tokens served and the cost in token units (a cached token at
``--cached-price-ratio`` of an input token; per resolved run too), beside the replay's
own counts: the ctx08 arm's under a cache that serves any shared start (OpenAI's,
DeepSeek's) and the current arm's (an append-only history: served whole under either
kind of cache). Entries do not
expire here (a step is well under the provider's five minutes), and a cache write is
counted at an input token's price (Anthropic bills it at 1.25).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Callable, Sequence
from itertools import groupby
from pathlib import Path

from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # window_cuts, beside it

from window_cuts import replay_store  # noqa: E402

from ctxdb.ab.reports import CACHED_PRICE_RATIO  # noqa: E402
from ctxdb.agent.arms import (  # noqa: E402
    CHAT_MESSAGE_OVERHEAD_TOKENS,
    CHAT_REPLY_PRIMING_TOKENS,
)
from ctxdb.agent.cache_marks import (  # noqa: E402
    PROVIDER_LOOKBACK_BLOCKS,
    middle_mark,
)
from ctxdb.migrate import StoreVersionError  # noqa: E402

# per decision: its tokens, and its window items (item id, tokens, text digest) in order
Window = tuple[int, list[tuple[str, int, str]]]
# a layout: a decision's window -> its blocks' ends (item counts) and the marked ones
Layout = Callable[[list[tuple[str, int, str]]], tuple[list[int], set[int]]]


def one_message(items: list[tuple[str, int, str]]) -> tuple[list[int], set[int]]:
    ends = [0] + ([len(items)] if items else [])
    return ends, {ends[-1]}


def ctxdb_marks(items: list[tuple[str, int, str]]) -> tuple[list[int], set[int]]:
    ends = list(range(len(items) + 1))
    if not items:
        return ends, {0}
    return ends, {0, middle_mark([item_id for item_id, _, _ in items]), len(items)}


def served(windows: Sequence[Window], layout: Layout) -> int:
    """Tokens a marks-only cache serves over one run's decisions, in order."""
    written: set[str] = set()
    total = 0
    for tokens, items in windows:
        # the harness's prompt: what is sent besides the items, less the reply's priming
        # (sent last) and the window message's own framing (only with a window)
        prompt = (tokens - sum(t for _, t, _ in items) - CHAT_REPLY_PRIMING_TOKENS
                  - (CHAT_MESSAGE_OVERHEAD_TOKENS if items else 0))
        digests, counts = [hashlib.sha256(b"prompt").hexdigest()], [prompt]
        running = prompt + CHAT_MESSAGE_OVERHEAD_TOKENS  # the framing opens the window
        for _, item_tokens, digest in items:
            digests.append(hashlib.sha256((digests[-1] + digest).encode()).hexdigest())
            running += item_tokens
            counts.append(running)
        ends, marks = layout(items)
        hit = 0
        for mark in marks:
            reachable = [end for end in ends if end <= mark][-PROVIDER_LOOKBACK_BLOCKS - 1:]
            found = next((end for end in reversed(reachable) if digests[end] in written), None)
            if found is not None:
                hit = max(hit, counts[found])
        total += min(hit, tokens)
        written.update(digests[mark] for mark in marks)
    return total


def read_runs(url: str) -> tuple[list[list[Window]], dict[str, tuple[int, int]], int]:
    """A replay store's ctx08 windows run by run, in order; each arm's prompt and cached
    tokens (ctx08, current); and the resolved runs."""
    engine = create_engine(url)
    with engine.connect() as connection:
        rows = connection.execute(text(
            "SELECT d.run_id, d.instance_id, d.decision_id, d.token_count, w.item_id,"
            " w.token_count, w.rendered_sha256"
            " FROM replay_decision r JOIN decision d ON d.decision_id = r.decision_id"
            " LEFT JOIN window_item w ON w.decision_id = d.decision_id"
            " WHERE r.arm = 'ctx08'"
            " ORDER BY d.run_id, d.instance_id, d.seq, d.decision_id, w.position")).all()
        arms = {arm: (int(tokens), int(cached)) for arm, tokens, cached in connection.execute(
            text("SELECT arm, SUM(prompt_tokens), SUM(cached_tokens) FROM replay_decision"
                 " WHERE arm IN ('ctx08', 'current') GROUP BY arm")).all()}
        resolved = connection.execute(text(
            "SELECT COUNT(*) FROM replay_run WHERE resolved")).scalar_one()
    engine.dispose()
    runs: list[list[Window]] = []
    for _, run_rows in groupby(rows, key=lambda row: (row[0], row[1])):
        windows: list[Window] = []
        for _, decision_rows in groupby(run_rows, key=lambda row: row[2]):
            listed = list(decision_rows)
            windows.append((int(listed[0][3]), [(r[4], int(r[5]), r[6]) for r in listed
                                                if r[4] is not None]))
        runs.append(windows)
    return runs, arms, int(resolved)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="the replay store (a URL or a path)")
    parser.add_argument("--cached-price-ratio", type=float, default=CACHED_PRICE_RATIO)
    args = parser.parse_args(argv)
    try:  # as window_cuts.py takes it: a path too, and a store it cannot read named
        url = replay_store(args.db)
    except (StoreVersionError, FileNotFoundError, ValueError) as error:
        parser.error(f"--db: {error}")
    runs, arms, resolved = read_runs(url)
    if not runs:
        parser.error(f"{args.db}: no replayed ctx08 decisions")
    ratio = args.cached_price_ratio
    current_cost = arms["current"][0] - (1 - ratio) * arms["current"][1]

    def row(name: str, tokens: int, cached: int) -> str:
        cost = tokens - (1 - ratio) * cached
        per_resolved = f"{cost / resolved:,.0f}" if resolved else "-"
        return (f"| {name} | {tokens / 1e6:.2f} M | {cached / 1e6:.2f} M | {cost / 1e6:.2f} M "
                f"| {per_resolved} | {cost / current_cost:.3f} |")

    print("| arm, cache | tokens | served | cost | per resolved run | of current's |")
    print("|---|---|---|---|---|---|")
    print(row("current, either cache", *arms["current"]))
    print(row("ctx08, any shared start", *arms["ctx08"]))
    for name, layout in (("ctx08, one message marked at its end", one_message),
                         ("ctx08, ctxdb's marks", ctxdb_marks)):
        print(row(name, arms["ctx08"][0], sum(served(windows, layout) for windows in runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
