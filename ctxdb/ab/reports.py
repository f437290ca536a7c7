"""A/B reports: each a file in ``sql/reports/`` run as-is (it also runs in sqlite3),
printed as a table, CSV, JSON, or one self-contained HTML page with plots."""

from __future__ import annotations

import csv
import difflib
import html
import io
import json
from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import Connection

from ..paths import SQL_DIR
from ..sqlfiles import sql_statement
from ..tokens import CACHED_PRICE_RATIO as CACHED_PRICE_RATIO  # the reports' default
from . import charts
from .formats import format_cell, format_number, format_percent, is_number

REPORTS_DIR = SQL_DIR / "reports"
AB_SECTIONS = ("runs", "arms", "decision_rule", "ablation", "edge_placement", "tokens")
# The replay's runs by length (replay_lengths): in quarters, shortest first; at most as
# many groups as PostgreSQL's NTILE takes (an integer).
REPLAY_LENGTH_GROUPS = 4
REPLAY_LENGTH_GROUPS_MAX = 2**31 - 1
# The value a report's parameter takes when its caller gives none (the CLI and the
# Datasette canned queries use the same).
REPORT_PARAMETER_DEFAULTS: dict[str, object] = {"cached_price_ratio": CACHED_PRICE_RATIO,
                                                "length_groups": REPLAY_LENGTH_GROUPS}
ORACLE = "oracle"
ORACLE_LEGEND = (
    "ranker oracle: each residue candidate scored 1.0 if it is one of the instance's gold "
    "facts, else 0.0, through the real HTTP path — the upper bound of any ranking model, "
    "not a model"
)


@dataclass(frozen=True)
class Report:
    name: str
    header: str
    columns: list[str]
    rows: list[tuple]


def report_names() -> list[str]:
    return sorted(p.stem for p in REPORTS_DIR.glob("*.sql"))


def report_parameters(name: str) -> tuple[str, ...]:
    """The parameters report ``name``'s SQL binds, in name order."""
    return tuple(sorted(sql_statement(f"reports/{name}").compile().params))


def run_report(connection: Connection, name: str,
               params: dict[str, object] | None = None) -> Report:
    """Report ``name`` run with its parameters bound: each from ``params``, else its
    documented default (``REPORT_PARAMETER_DEFAULTS``); a report without parameters
    ignores ``params``."""
    if name not in report_names():
        known = report_names() + ["ab", "replay"]
        near = difflib.get_close_matches(name, known, n=1)
        meant = f" (did you mean {near[0]}?)" if near else ""
        raise ValueError(f"report {name!r}{meant}: expected one of {', '.join(known)}")
    path = REPORTS_DIR / f"{name}.sql"
    header = " ".join(
        line[2:].strip() for line in path.read_text(encoding="utf-8").splitlines()
        if line.startswith("--")
    )
    given = {**REPORT_PARAMETER_DEFAULTS, **(params or {})}
    names = report_parameters(name)
    missing = [p for p in names if p not in given]
    if missing:
        raise ValueError(f"report {name!r}: expected a value for {', '.join(missing)}")
    result = connection.execute(sql_statement(f"reports/{name}"), {p: given[p] for p in names})
    # PostgreSQL answers NUMERIC for 1.0 * x / y; reports speak floats on both backends.
    rows = [tuple(float(v) if isinstance(v, Decimal) else v for v in r) for r in result]
    return Report(name, header, list(result.keys()), rows)


def _numeric_columns(report: Report, index: list[int]) -> list[bool]:
    """Per column: whether it holds numbers (and missing values) only — aligned right."""
    return [any(is_number(row[i]) for row in report.rows)
            and all(is_number(row[i]) or row[i] is None for row in report.rows)
            for i in index]


def as_table(report: Report, columns: list[str] | None = None) -> str:
    """Plain text, numbers right-aligned, every cell written by ``format_cell``."""
    columns = columns or report.columns
    index = [report.columns.index(c) for c in columns]
    cells = [[format_cell(c, row[i]) for c, i in zip(columns, index, strict=True)]
             for row in report.rows]
    numeric = _numeric_columns(report, index)
    widths = [max([len(c)] + [len(r[n]) for r in cells]) for n, c in enumerate(columns)]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if right else v.ljust(w)
                         for v, w, right in zip(values, widths, numeric, strict=True)).rstrip()

    lines = [line(columns), "  ".join("-" * w for w in widths)]
    lines += [line(r) for r in cells]
    return "\n".join(lines)


CSV_SIGNIFICANT_DIGITS = 12  # a sum of floats read as 7815562.9, not 7815562.900000003


def as_csv(report: Report) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(report.columns)
    writer.writerows([format(value, f".{CSV_SIGNIFICANT_DIGITS}g")
                      if isinstance(value, float) else value for value in row]
                     for row in report.rows)
    return out.getvalue()


def as_json(report: Report) -> str:
    return json.dumps({"report": report.name, "about": report.header,
                       "rows": [dict(zip(report.columns, r, strict=True)) for r in report.rows]},
                      indent=2, default=str)


def rankers_by_arm(runs: Report) -> dict[tuple[str, str], str]:
    """(arm, variant) -> the ranker(s) of its runs, from the ``runs`` report."""
    c = {name: n for n, name in enumerate(runs.columns)}
    found: dict[tuple[str, str], set[str]] = {}
    for row in runs.rows:
        found.setdefault((row[c["arm"]], row[c["variant"]]), set()).add(row[c["ranker"]] or "–")
    return {key: ", ".join(sorted(names)) for key, names in found.items()}


def with_ranker(report: Report, rankers: dict[tuple[str, str], str]) -> Report:
    """The report with a ``ranker`` column after ``variant`` (rows without an arm column
    are ctx08's: the ablation compares ctx08 variants)."""
    v = report.columns.index("variant")
    a = report.columns.index("arm") if "arm" in report.columns else None
    rows = [row[:v + 1] + (rankers.get((row[a] if a is not None else "ctx08", row[v])),)
            + row[v + 1:] for row in report.rows]
    return Report(report.name, report.header,
                  report.columns[:v + 1] + ["ranker"] + report.columns[v + 1:], rows)


def _oracle_ranked(rankers: dict[tuple[str, str], str]) -> bool:
    return any(ORACLE in names.split(", ") for names in rankers.values())


RECALL_COLUMNS = ["decision_type", "arm", "variant", "ranker", "scope", "facts", "pool_recall",
                  "window_recall", "changed_recall", "recall_ratio", "residue_recall",
                  "residue_median", "residue_p95", "ranked_share", "median_tokens"]


LOOP_COST_REPORT = "loop_cost"  # a live A/B's costs under a prompt cache (sql/reports/)
# under the A/B screen's title when the store holds live agent-loop runs: its tokens are
# raw, where a prompt cache serves most of an append-only history
LOOP_RUNS_NOTE = ("This store holds live agent-loop runs: their cost under a prompt cache, "
                  "paired by instance, is `ctxdb report loop_cost`; the tables below count "
                  "raw tokens.")


def ab_screen(connection: Connection) -> str:
    """The whole A/B on one screen: both arms side by side, §7.4 and §7.5 verdicts."""
    runs = run_report(connection, "runs")
    rankers = rankers_by_arm(runs)
    arms = with_ranker(run_report(connection, "arms"), rankers)
    rule = run_report(connection, "decision_rule")
    ablation = with_ranker(run_report(connection, "ablation"), rankers)
    edges = with_ranker(run_report(connection, "edge_placement"), rankers)
    recall = run_report(connection, "window_recall")
    candidate = rankers.get(("ctx08", "default"))
    parts = ["A/B: ctx08 (constructed window) vs current (stuff everything)"]
    if _oracle_ranked(rankers):
        parts.append(ORACLE_LEGEND)
    if connection.execute(sql_statement("reports_support/live_loop_run_held")).first():
        parts.append(LOOP_RUNS_NOTE)
    parts += [
        "",
        as_table(runs, ["run_id", "ranker", "decisions", "rank_calls", "rank_calls_ok"]),
        "",
        as_table(arms, ["arm", "variant", "ranker", "decisions", "precision_items",
                        "precision_tokens", "gold_recall", "mean_tokens", "max_tokens",
                        "budget_adherence", "resolve_rate", "tokens_per_solved"]),
        "",
        "What the window keeps of what its pool holds (sql/reports/window_recall.sql)",
        as_table(recall, RECALL_COLUMNS),
        "",
        "§7.4 decision rule" + (f" (candidate ctx08/default, ranker {candidate})"
                                if candidate else ""),
        as_table(rule, ["clause_no", "clause", "candidate", "baseline", "verdict"]),
        "",
        "§7.6 placement of critical items (share at the window's edges)",
        as_table(edges, ["arm", "variant", "ranker", "critical_items", "critical_at_edges",
                         "edge_critical_outside_middle"]),
    ]
    if ablation.rows:
        parts += ["", "§7.5 ablation (Δ relative to ctx08/default)",
                  as_table(ablation, ["variant", "ranker", "d_precision_items",
                                      "d_precision_tokens", "d_gold_recall", "d_mean_tokens",
                                      "d_resolve_rate", "verdict"])]
    return "\n".join(parts)


# --- HTML ---------------------------------------------------------------------------------------

ARM_COLORS = {"ctx08": "#2b6cb0", "current": "#c05621"}
UNKNOWN_ARM_COLOR = "#718096"
ARM_LEGEND = {"ctx08": "ctx08: the constructed window (spec 08)",
              "current": "current: stuff everything (the baseline)"}
PAGE_WIDTH = 1240  # px of content: the page and its tables fit a 1,300 px window
CHART_BORDER = 1  # px on each side of a plot (the style's svg.chart border)
CHART_WIDTH = PAGE_WIDTH - 2 * CHART_BORDER
PANELS_PER_ROW, PANEL_GAP, PANEL_HEIGHT = 3, 8, 220
SCATTER_HEIGHT = 320
PLACEMENT_BINS = 20  # twentieths: the edges of §7.6 (first and last quarter) fall on bins
STYLE = (
    f"body{{font-family:system-ui,sans-serif;color:#1a202c;max-width:{PAGE_WIDTH}px;"
    "margin:24px auto;"
    "padding:0 16px}"
    "h2{margin:1.4em 0 .3em}p{margin:.3em 0 .6em;max-width:900px}"
    ".table-scroll{max-width:100%;overflow-x:auto;margin-bottom:1em}"
    "table{border-collapse:collapse;font-size:12px}"
    "td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}"
    "th{background:#f0f0f0;text-align:left;font-weight:600}"
    "td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
    "td.text{white-space:nowrap}td.verdict{min-width:16em}"
    ".legend{display:flex;flex-wrap:wrap;gap:6px 20px;font-size:13px;margin:.2em 0 .4em}"
    ".legend i{display:inline-block;width:14px;height:10px;margin-right:6px;"
    "background:var(--key)}"
    ".legend i.outline{background:none;height:0;border-top:2px dashed var(--key);"
    "vertical-align:middle}"
    ".legend i.zone{border:1px solid #d6d0bc}"
    f".panels{{display:flex;flex-wrap:wrap;gap:{PANEL_GAP}px}}"
    f"svg.chart{{border:{CHART_BORDER}px solid #eee;background:#fff;display:block}}"
    ".summary{background:#f7fafc;border:1px solid #e2e8f0;padding:.5em .8em}"
)


def _arm_color(arm: str) -> str:
    return ARM_COLORS.get(arm, UNKNOWN_ARM_COLOR)


def _arm_legend(arms: list[str], suffix: str = "") -> list[charts.LegendEntry]:
    return [charts.LegendEntry(ARM_LEGEND.get(arm, arm) + suffix, _arm_color(arm), arm=arm)
            for arm in sorted(set(arms), key=_arm_rank)]


def _arm_rank(arm: str) -> int:
    return 0 if arm == "current" else 1  # the baseline first, then the candidate


def _order(arm: str, variant: str) -> tuple:
    """Baseline, then ctx08/default, then the other variants by name."""
    return (_arm_rank(arm), variant != "default", variant)


def _header_cell(column: str) -> str:
    # a long column name may break after its underscores, never inside a word
    return f"<th>{html.escape(column).replace('_', '_<wbr>')}</th>"


def html_table(report: Report, columns: list[str] | None = None) -> str:
    """The report (or ``columns`` of it) as an HTML table, every cell escaped."""
    columns = columns or report.columns
    index = [report.columns.index(c) for c in columns]
    head = "".join(_header_cell(c) for c in columns)
    classes = ["num" if numeric else "verdict" if column == "verdict" else "text"
               for column, numeric in zip(columns, _numeric_columns(report, index), strict=True)]
    rows = []
    for row in report.rows:
        cells = []
        for column, i, css in zip(columns, index, classes, strict=True):
            cells.append(f'<td class="{css}">{html.escape(format_cell(column, row[i]))}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="table-scroll"><table><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def html_page(title: str, body: str) -> str:
    """A self-contained page: ``body`` (HTML already) under the reports' one stylesheet."""
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
            + body + "</body></html>")


def single_html(report: Report) -> str:
    return html_page(f"ctxdb {report.name}",
                     f"<h1>{html.escape(report.name)}</h1><p>{html.escape(report.header)}</p>"
                     + html_table(report))


def _column(report: Report, name: str) -> int:
    return report.columns.index(name)


def _tokens_chart(arms: Report) -> str:
    arm, variant, ranker = (_column(arms, c) for c in ("arm", "variant", "ranker"))
    mean = _column(arms, "mean_tokens")
    rows = sorted(arms.rows, key=lambda r: _order(r[arm], r[variant]))
    bars = [charts.Bar(f"{r[arm]}/{r[variant]}" + (f" ({ORACLE} ranker)" if r[ranker] == ORACLE
                                                    else ""),
                       float(r[mean] or 0), _arm_color(r[arm]),
                       format_cell("mean_tokens", r[mean]))
            for r in rows]
    return (charts.legend(_arm_legend([r[arm] for r in rows]))
            + charts.horizontal_bars("mean tokens per decision", bars,
                                     "tokens per decision (mean over the run's decisions)",
                                     CHART_WIDTH))


def _precision_chart(connection: Connection) -> str:
    precision = run_report(connection, "precision")
    tokens_by_decision: dict[int, int] = {
        row[0]: row[1]
        for row in connection.execute(sql_statement("reports_support/decision_tokens"))}
    c = {name: n for n, name in enumerate(precision.columns)}
    # a decision with no precision (no gold facts: a live or replayed run) has no dot
    rows = [r for r in precision.rows
            if r[c["variant"]] == "default" and r[c["precision_items"]] is not None]
    points = [charts.Point(
        float(tokens_by_decision.get(r[c["decision_id"]], 0)), r[c["precision_items"]],
        _arm_color(r[c["arm"]]),
        f"decision {r[c['decision_id']]} {r[c['arm']]}/{r[c['variant']]} "
        f"{r[c['decision_type']]} {r[c['instance_id']]}: "
        f"{format_number(tokens_by_decision.get(r[c['decision_id']], 0))} tokens, "
        f"precision {format_cell('precision_items', r[c['precision_items']])}")
        for r in rows]
    if not points:
        return ("<p>relevance precision against tokens: no decision has a precision to "
                "plot (none has gold facts: a live or replayed run).</p>")
    return (charts.legend(_arm_legend([r[c["arm"]] for r in rows], " — one dot per decision"))
            + charts.scatter("relevance precision against tokens", points,
                             "tokens in the window (one decision)",
                             "relevance precision (items)", CHART_WIDTH, SCATTER_HEIGHT,
                             y_top=1.0))


def _placement_charts(connection: Connection, edges: Report) -> str:
    """Small multiples: one panel per arm and variant, on one y scale."""
    counts: dict[tuple[str, str], dict[int, list[int]]] = {}
    for row in connection.execute(sql_statement("reports_support/placement_bins"),
                                  {"bins": PLACEMENT_BINS}):
        bins = counts.setdefault((row.arm, row.variant), {1: [0] * PLACEMENT_BINS,
                                                          0: [0] * PLACEMENT_BINS})
        bins[int(row.is_gold)][int(row.bin_no)] += int(row.items)
    e = {name: n for n, name in enumerate(edges.columns)}
    at_edges = {(r[e["arm"]], r[e["variant"]]): r[e["critical_at_edges"]] for r in edges.rows}

    def shares(values: list[int]) -> list[float]:
        total = sum(values)
        return [v / total if total else 0.0 for v in values]

    panels = {key: (shares(b[1]), shares(b[0]), sum(b[1])) for key, b in counts.items()}
    top = max([max(c + o) for c, o, _ in panels.values()] + [0.0])
    width = ((PAGE_WIDTH - (PANELS_PER_ROW - 1) * PANEL_GAP) // PANELS_PER_ROW
             - 2 * CHART_BORDER)
    svgs = []
    for (arm, variant) in sorted(panels, key=lambda k: _order(*k)):
        critical, others, total = panels[(arm, variant)]
        share = at_edges.get((arm, variant))
        subtitle = f"{format_number(total)} critical items" + (
            f", {format_percent(share)} of them at the edges"
            if share is not None else "")
        svgs.append(charts.placement_panel(f"{arm}/{variant}", subtitle, critical, others,
                                           _arm_color(arm), top, width, PANEL_HEIGHT))
    entries = _arm_legend([arm for arm, _ in panels], " — its critical items (gold facts)")
    entries += [charts.LegendEntry("other evidence items of the same windows",
                                   charts.OTHER_COLOR, style="outline"),
                charts.LegendEntry("edges: first and last quarter of the window's tokens",
                                   charts.EDGE_ZONE_COLOR, style="zone")]
    return charts.legend(entries) + f'<div class="panels">{"".join(svgs)}</div>'


def _summary(rule: Report, ablation: Report) -> str:
    verdict = _column(rule, "verdict")
    decision = rule.rows[-1][verdict] if rule.rows else "no data"
    parts = [f"<strong>§7.4 decision:</strong> {html.escape(decision)}"]
    if ablation.rows:
        tally: dict[str, int] = {}
        for row in ablation.rows:
            word = row[_column(ablation, "verdict")].split(":")[0]
            tally[word] = tally.get(word, 0) + 1
        parts.append("<strong>§7.5 ablation:</strong> " + html.escape(
            ", ".join(f"{n} {word}" for word, n in sorted(tally.items()))))
    return f'<p class="summary">{" · ".join(parts)}</p>'


def ab_html(connection: Connection) -> str:
    """One self-contained page (inline SVG, no scripts, no network) for the A/B."""
    runs = run_report(connection, "runs")
    rankers = rankers_by_arm(runs)
    arms = with_ranker(run_report(connection, "arms"), rankers)
    rule = run_report(connection, "decision_rule")
    ablation = with_ranker(run_report(connection, "ablation"), rankers)
    edges = with_ranker(run_report(connection, "edge_placement"), rankers)
    recall = run_report(connection, "window_recall")
    sections = [
        "<h1>ctxdb A/B report</h1>",
        "<p>ctxdb (constructed window, spec 08) against the “stuff everything” baseline. "
        "Every figure is SQL over the store: <code>sql/reports/</code>.</p>",
        f"<p><strong>{html.escape(ORACLE_LEGEND)}</strong></p>" if _oracle_ranked(rankers) else "",
        _summary(rule, ablation),
        "<h2>Tokens per decision, by arm and variant</h2>",
        _tokens_chart(arms),
        "<h2>Relevance precision against tokens (default variants)</h2>",
        "<p>Precision: the share of the window's evidence items that are gold facts of the "
        "instance (§7.2). Up and to the left is better.</p>",
        _precision_chart(connection),
        "<h2>Where critical items sit, one panel per arm and variant (§7.6)</h2>",
        "<p>Each window split into twentieths by its tokens; a bar is the share of the "
        "panel's critical items whose middle falls there, the dashed line the same share "
        "for the other evidence items. One y scale for every panel.</p>",
        _placement_charts(connection, edges),
        "<h2>Runs and their rankers</h2>", html_table(runs),
        "<h2>Arms side by side</h2>", html_table(arms),
        "<h2>What the window keeps of what its pool holds</h2>",
        "<p>Definitions at the top of <code>sql/reports/window_recall.sql</code>.</p>",
        html_table(recall),
        "<h2>§7.4 decision rule</h2>", html_table(rule),
        "<h2>§7.5 ablation (Δ relative to ctx08/default)</h2>",
        html_table(ablation) if ablation.rows else "<p>No ablation variants in this store.</p>",
        "<h2>§7.6 placement</h2>", html_table(edges),
    ]
    return html_page("ctxdb A/B", "".join(sections))
