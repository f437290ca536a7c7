"""The replay report (issue 20): the recorded agent runs replayed in three arms — ctx08
(the constructed window), current (what the harness sent) and mask10 (that, with
observations older than the 10 newest masked) — and the window with each rule off
(``ctx08-without-RULE``; ``--arms`` picks some), as one screen of text tables, one JSON
object or one self-contained HTML page. Every figure is SQL over the store:
``sql/reports/replay_*.sql``.
"""

from __future__ import annotations

import html
import json
from collections.abc import Collection

from sqlalchemy import Connection

from ..ab import charts, reports
from ..ab.formats import format_number
from ..ab.reports import CACHED_PRICE_RATIO, REPLAY_LENGTH_GROUPS, Report
from ..sqlfiles import sql_statement

# Section name -> its report (sql/reports/<report>.sql), in the order they are shown.
SECTIONS = {
    "arms": "replay_arms",
    "recall": "replay_recall",
    "fates": "replay_fates",
    "parts": "replay_parts",
    "fidelity": "replay_fidelity",
    "lengths": "replay_lengths",
    "steps": "replay_steps",
}
ARM_ORDER = ("current", "mask10", "ctx08")  # the reference, its masked variant, ours
ARM_LEGEND = {
    "current": "current: what the harness sent (its whole history)",
    "mask10": "mask10: that history, observations older than the 10 newest masked",
    "ctx08": "ctx08: the constructed window (spec 08)",
}
ARM_COLORS = {**reports.ARM_COLORS, "mask10": "#2f855a"}
DASHED_ARMS = {"mask10"}  # told apart from current by more than its colour
STEP_CHART_HEIGHT = 320
# The arms section on a screen: two tables of a readable width, tokens then cost, each
# ending with its ratio to the arm the issue measures it against.
ARMS_SCREEN_TABLES = (
    ["run_id", "arm", "runs", "resolved_runs", "decisions", "median_prompt_tokens",
     "p90_prompt_tokens", "total_prompt_tokens", "tokens_per_resolved_run",
     "tokens_of_mask10"],
    ["run_id", "arm", "cached_share", "cost_tokens", "median_cost_per_run",
     "cost_per_resolved_run", "cost_of_current", "refused_decisions",
     "tree_unknown_decisions"],
)
# The recall section on a screen: all anchors and those at edits, then those on a tree
# known to be the recorded run's.
RECALL_SCREEN_TABLES = (
    ["run_id", "arm", "anchor_class", "anchors", "kept", "recall", "edit_anchors",
     "edit_kept", "edit_recall"],
    ["run_id", "arm", "anchor_class", "tree_known_anchors", "tree_known_kept",
     "tree_known_recall"],
)


def _arm_rank(arm: str) -> tuple[int, str]:
    return (ARM_ORDER.index(arm) if arm in ARM_ORDER else len(ARM_ORDER), arm)


def replay_sections(connection: Connection, cached_price_ratio: float = CACHED_PRICE_RATIO,
                    length_groups: int = REPLAY_LENGTH_GROUPS,
                    arms: Collection[str] | None = None) -> dict[str, Report]:
    """Each section's report, run with ``cached_price_ratio`` and ``length_groups`` bound
    where they are named; with ``arms``, only their rows (``only_arms``)."""
    params = _params(cached_price_ratio, length_groups)
    return {section: only_arms(reports.run_report(connection, name, params), arms)
            for section, name in SECTIONS.items()}


def only_arms(report: Report, arms: Collection[str] | None) -> Report:
    """``report`` with the rows of ``arms`` alone, when it has an ``arm`` column and arms
    are given (a replay measures many: the window, two references and one arm per rule
    off), else as it is."""
    if arms is None or "arm" not in report.columns:
        return report
    at = report.columns.index("arm")
    return Report(report.name, report.header, report.columns,
                  [row for row in report.rows if row[at] in arms])


def replay_arm_names(connection: Connection) -> list[str]:
    """The arms the store's replays were measured in."""
    return [row.arm for row in connection.execute(
        sql_statement("reports_support/replay_arm_names"))]


def _params(cached_price_ratio: float, length_groups: int) -> dict[str, object]:
    return {"cached_price_ratio": cached_price_ratio, "length_groups": length_groups}


def steps_by_arm(steps: Report) -> Report:
    """``replay_steps`` with one row per store run and decision, one column per arm (its
    median prompt tokens) and ``runs``: how many replayed runs reach the decision."""
    c = {name: n for n, name in enumerate(steps.columns)}
    arms = sorted({row[c["arm"]] for row in steps.rows}, key=_arm_rank)
    cells: dict[tuple[str, int], dict[str, object]] = {}
    for row in steps.rows:
        cell = cells.setdefault((row[c["run_id"]], row[c["seq"]]), {"runs": 0})
        cell["runs"] = max(cell["runs"], row[c["runs"]])
        cell[row[c["arm"]]] = row[c["median_prompt_tokens"]]
    rows = [(run_id, seq, cell["runs"], *(cell.get(arm) for arm in arms))
            for (run_id, seq), cell in sorted(cells.items())]
    return Report(steps.name, steps.header, ["run_id", "seq", "runs", *arms], rows)


def _title(cached_price_ratio: float) -> list[str]:
    return ["Replay: ctx08 (constructed window) vs current (what the harness sent) vs mask10 "
            "(observations older than the 10 newest masked)",
            f"Cost in token units: a cached prompt token at {cached_price_ratio:g} of an input "
            "token's price (--cached-price-ratio)."]


SCREEN_TITLES = {
    "arms": "Tokens and cost by arm (sql/reports/replay_arms.sql)",
    "recall": "Anchor recall: of the anchors the current arm kept, the share each arm kept "
              "(all decisions; edit_*: decisions the agent followed with an edit; "
              "tree_known_*: decisions on a tree known to be the recorded run's)",
    "fates": "Where the lost anchors went (fate of the newest observation holding each)",
    "parts": "Where a constructed window's tokens went: its parts by kind and rendering "
             "(harness_prompt: the rest, the harness's own messages with the window's "
             "header and the chat framing)",
    "fidelity": "Working trees rebuilt: matching the submission, lost, and why",
    "lengths": "By run length: the runs in up to {length_groups} groups by their decisions "
               "(as many as there are runs, if fewer), shortest first (tokens as a share of "
               "mask10's, cost of current's)",
    "steps": "Median prompt tokens per decision (seq), by arm",
}


SCREEN_TABLES = {"arms": ARMS_SCREEN_TABLES, "recall": RECALL_SCREEN_TABLES}


def replay_screen(connection: Connection, cached_price_ratio: float = CACHED_PRICE_RATIO,
                  length_groups: int = REPLAY_LENGTH_GROUPS,
                  arms: Collection[str] | None = None) -> str:
    """The replay on one screen: the seven sections as text tables, each under a title."""
    sections = replay_sections(connection, cached_price_ratio, length_groups, arms)
    sections["steps"] = steps_by_arm(sections["steps"])
    parts = _title(cached_price_ratio)
    for section, report in sections.items():
        parts += ["", SCREEN_TITLES[section].format(length_groups=length_groups)]
        if not report.rows:
            parts.append("(no rows)")
        elif section in SCREEN_TABLES:
            parts.append("\n\n".join(reports.as_table(report, columns)
                                     for columns in SCREEN_TABLES[section]))
        else:
            parts.append(reports.as_table(report))
    return "\n".join(parts)


def replay_json(connection: Connection, cached_price_ratio: float = CACHED_PRICE_RATIO,
                length_groups: int = REPLAY_LENGTH_GROUPS,
                arms: Collection[str] | None = None) -> str:
    """One JSON object keyed by section: each its report's name, what it computes, the
    parameters it was run with and its rows (raw values)."""
    document = {}
    params = _params(cached_price_ratio, length_groups)
    for section, report in replay_sections(connection, cached_price_ratio,
                                           length_groups, arms).items():
        parameters = {name: params[name] for name in reports.report_parameters(report.name)}
        document[section] = {"report": report.name, "about": report.header,
                             "parameters": parameters,
                             "rows": [dict(zip(report.columns, r, strict=True))
                                      for r in report.rows]}
    return json.dumps(document, indent=2, default=str)


def replay_csv(connection: Connection, cached_price_ratio: float = CACHED_PRICE_RATIO,
               length_groups: int = REPLAY_LENGTH_GROUPS,
               arms: Collection[str] | None = None) -> str:
    """Each section as CSV under a ``# section`` line, as ``report ab --format csv``."""
    return "\n".join(f"# {section}\n{reports.as_csv(report)}"
                     for section, report in replay_sections(
                         connection, cached_price_ratio, length_groups, arms).items())


# --- HTML ---------------------------------------------------------------------------------------


def _steps_charts(steps: Report) -> str:
    """One plot per store run: median prompt tokens per decision, a line per arm."""
    c = {name: n for n, name in enumerate(steps.columns)}
    lines: dict[str, dict[str, list[charts.Point]]] = {}
    for row in steps.rows:
        arm, seq, tokens = row[c["arm"]], row[c["seq"]], row[c["median_prompt_tokens"]]
        lines.setdefault(row[c["run_id"]], {}).setdefault(arm, []).append(charts.Point(
            float(seq), float(tokens), ARM_COLORS.get(arm, reports.UNKNOWN_ARM_COLOR),
            f"{arm}, decision {seq}: {format_number(tokens)} tokens "
            f"(median of {format_number(row[c['runs']])} runs)"))
    if not lines:
        return "<p>No replayed runs in this store.</p>"
    arms = sorted({arm for by_arm in lines.values() for arm in by_arm}, key=_arm_rank)
    legend = charts.legend([charts.LegendEntry(
        ARM_LEGEND.get(arm, arm), ARM_COLORS.get(arm, reports.UNKNOWN_ARM_COLOR), arm=arm,
        style="outline" if arm in DASHED_ARMS else "swatch") for arm in arms])
    plots = []
    for run_id, by_arm in sorted(lines.items()):
        series = [charts.Series(arm, ARM_COLORS.get(arm, reports.UNKNOWN_ARM_COLOR),
                                sorted(points, key=lambda p: p.x), dashed=arm in DASHED_ARMS)
                  for arm, points in sorted(by_arm.items(), key=lambda item: _arm_rank(item[0]))]
        plots.append(f"<h3>{html.escape(run_id)}</h3>" + charts.line_chart(
            f"median prompt tokens per decision: {run_id}", series,
            "decision (seq: the window sent before the agent's k-th turn)",
            "median prompt tokens", reports.CHART_WIDTH, STEP_CHART_HEIGHT))
    return legend + "".join(plots)


def _section_table(report: Report, columns: list[str] | None = None) -> str:
    if not report.rows:
        return "<p>No rows.</p>"
    return reports.html_table(report, columns)


def replay_html(connection: Connection, cached_price_ratio: float = CACHED_PRICE_RATIO,
                length_groups: int = REPLAY_LENGTH_GROUPS,
                arms: Collection[str] | None = None) -> str:
    """One self-contained page (inline SVG, no scripts, no network) for the replay."""
    sections = replay_sections(connection, cached_price_ratio, length_groups, arms)
    title, cost_note = _title(cached_price_ratio)
    body = [
        "<h1>ctxdb replay report</h1>",
        f"<p>{html.escape(title)}. Every figure is SQL over the store: "
        "<code>sql/reports/replay_*.sql</code>.</p>",
        f"<p>{html.escape(cost_note)}</p>",
        "<h2>Median prompt tokens per decision</h2>",
        "<p>Each point: the median over the replayed runs that reach that decision; later "
        "decisions rest on fewer runs (hover a point for how many).</p>",
        _steps_charts(sections["steps"]),
    ]
    for section in ("arms", "recall", "fates", "parts", "fidelity", "lengths"):
        report = sections[section]
        title = SCREEN_TITLES[section].format(length_groups=length_groups)
        body += [f"<h2>{html.escape(title)}</h2>",
                 f"<p>{html.escape(report.header)}</p>", _section_table(report)]
    return reports.html_page("ctxdb replay", "".join(body))
