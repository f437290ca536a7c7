"""A/B reports: each a file in ``sql/reports/`` run as-is (it also runs in sqlite3),
printed as a table, CSV, JSON, or one self-contained HTML page with plots."""

from __future__ import annotations

import csv
import html
import io
import json
from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import Connection

from ..paths import SQL_DIR
from ..sqlfiles import sql_statement

REPORTS_DIR = SQL_DIR / "reports"
AB_SECTIONS = ("runs", "arms", "decision_rule", "ablation", "edge_placement", "tokens")
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


def run_report(connection: Connection, name: str) -> Report:
    if name not in report_names():
        raise ValueError(f"report {name!r}: expected one of {', '.join(report_names() + ['ab'])}")
    path = REPORTS_DIR / f"{name}.sql"
    header = " ".join(
        line[2:].strip() for line in path.read_text(encoding="utf-8").splitlines()
        if line.startswith("--")
    )
    result = connection.execute(sql_statement(f"reports/{name}"))
    # PostgreSQL answers NUMERIC for 1.0 * x / y; reports speak floats on both backends.
    rows = [tuple(float(v) if isinstance(v, Decimal) else v for v in r) for r in result]
    return Report(name, header, list(result.keys()), rows)


def _cell(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def as_table(report: Report, columns: list[str] | None = None) -> str:
    columns = columns or report.columns
    index = [report.columns.index(c) for c in columns]
    cells = [[_cell(row[i]) for i in index] for row in report.rows]
    widths = [max([len(c)] + [len(r[n]) for r in cells]) for n, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def as_csv(report: Report) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(report.columns)
    writer.writerows(report.rows)
    return out.getvalue()


def as_json(report: Report) -> str:
    return json.dumps({"report": report.name, "about": report.header,
                       "rows": [dict(zip(report.columns, r)) for r in report.rows]},
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

_PALETTE = {"ctx08": "#2b6cb0", "current": "#c05621"}
PLOT_WIDTH, PLOT_HEIGHT, PLOT_MARGIN = 560, 260, 48


def _svg_bars(title: str, labels: list[str], values: list[float], colors: list[str]) -> str:
    top = max(values + [1.0])
    bar = (PLOT_WIDTH - 2 * PLOT_MARGIN) / max(len(values), 1)
    parts = [f'<svg width="{PLOT_WIDTH}" height="{PLOT_HEIGHT}" role="img">'
             f"<title>{html.escape(title)}</title>"]
    for n, (label, value, color) in enumerate(zip(labels, values, colors)):
        height = (PLOT_HEIGHT - 2 * PLOT_MARGIN) * value / top
        x = PLOT_MARGIN + n * bar
        y = PLOT_HEIGHT - PLOT_MARGIN - height
        parts.append(f'<rect x="{x + 4:.1f}" y="{y:.1f}" width="{bar - 8:.1f}" '
                     f'height="{height:.1f}" fill="{color}"/>')
        parts.append(f'<text x="{x + bar / 2:.1f}" y="{y - 4:.1f}" font-size="11" '
                     f'text-anchor="middle">{value:,.0f}</text>')
        parts.append(f'<text x="{x + bar / 2:.1f}" y="{PLOT_HEIGHT - PLOT_MARGIN + 14:.1f}" '
                     f'font-size="10" text-anchor="middle">{html.escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _svg_scatter(title: str, points: list[tuple[float, float, str, str]],
                 x_label: str, y_label: str) -> str:
    max_x = max([p[0] for p in points] + [1.0])
    parts = [f'<svg width="{PLOT_WIDTH}" height="{PLOT_HEIGHT}" role="img">'
             f"<title>{html.escape(title)}</title>",
             f'<line x1="{PLOT_MARGIN}" y1="{PLOT_HEIGHT - PLOT_MARGIN}" '
             f'x2="{PLOT_WIDTH - PLOT_MARGIN}" y2="{PLOT_HEIGHT - PLOT_MARGIN}" stroke="#888"/>',
             f'<line x1="{PLOT_MARGIN}" y1="{PLOT_MARGIN}" x2="{PLOT_MARGIN}" '
             f'y2="{PLOT_HEIGHT - PLOT_MARGIN}" stroke="#888"/>',
             f'<text x="{PLOT_WIDTH / 2}" y="{PLOT_HEIGHT - 10}" font-size="11" '
             f'text-anchor="middle">{html.escape(x_label)}</text>',
             f'<text x="12" y="{PLOT_HEIGHT / 2}" font-size="11" '
             f'transform="rotate(-90 12 {PLOT_HEIGHT / 2})" text-anchor="middle">'
             f"{html.escape(y_label)}</text>"]
    for x, y, color, label in points:
        cx = PLOT_MARGIN + (PLOT_WIDTH - 2 * PLOT_MARGIN) * x / max_x
        cy = PLOT_HEIGHT - PLOT_MARGIN - (PLOT_HEIGHT - 2 * PLOT_MARGIN) * (y or 0)
        parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{color}" '
                     f'fill-opacity="0.7"><title>{html.escape(label)}</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


def _html_table(report: Report) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in report.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row) + "</tr>"
        for row in report.rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def single_html(report: Report) -> str:
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>ctxdb {html.escape(report.name)}</title></head><body>"
            f"<h1>{html.escape(report.name)}</h1><p>{html.escape(report.header)}</p>"
            + _html_table(report) + "</body></html>")


def ab_html(connection: Connection) -> str:
    """One self-contained page (inline SVG, no scripts, no network) for the A/B."""
    runs = run_report(connection, "runs")
    rankers = rankers_by_arm(runs)
    arms = with_ranker(run_report(connection, "arms"), rankers)
    precision = run_report(connection, "precision")
    rule = run_report(connection, "decision_rule")
    ablation = with_ranker(run_report(connection, "ablation"), rankers)
    edges = with_ranker(run_report(connection, "edge_placement"), rankers)
    recall = run_report(connection, "window_recall")
    positions = connection.execute(sql_statement("reports_support/critical_positions")).all()

    a = {c: i for i, c in enumerate(arms.columns)}
    labels = [f"{r[a['arm']]}/{r[a['variant']]}"
              + (f" ({ORACLE} ranker)" if r[a["ranker"]] == ORACLE else "") for r in arms.rows]
    tokens = [float(r[a["mean_tokens"]] or 0) for r in arms.rows]
    colors = [_PALETTE.get(r[a["arm"]], "#718096") for r in arms.rows]
    p = {c: i for i, c in enumerate(precision.columns)}
    tokens_by_decision = dict(connection.execute(sql_statement("reports_support/decision_tokens")).all())
    points = [
        (float(tokens_by_decision.get(r[p["decision_id"]], 0)), r[p["precision_items"]],
         _PALETTE.get(r[p["arm"]], "#718096"),
         f"decision {r[p['decision_id']]} {r[p['arm']]}/{r[p['variant']]} {r[p['decision_type']]}")
        for r in precision.rows if r[p["variant"]] == "default"
    ]
    position_points = [
        (float(row.relative_position), 1.0 if row.is_gold else 0.5,
         _PALETTE.get(row.arm, "#718096"), f"{row.arm}/{row.variant} decision {row.decision_id}")
        for row in positions if row.variant in ("default", "litm_buried")
    ]
    sections = [
        "<h1>ctxdb A/B report</h1>",
        "<p>ctxdb (constructed window, spec 08) against the “stuff everything” baseline. "
        "Every figure is SQL over the store: <code>sql/reports/</code>.</p>",
        f"<p><strong>{html.escape(ORACLE_LEGEND)}</strong></p>" if _oracle_ranked(rankers) else "",
        "<h2>Tokens per decision, by arm</h2>",
        _svg_bars("mean tokens per decision", labels, tokens, colors),
        "<h2>Relevance precision against tokens (default variants)</h2>",
        _svg_scatter("precision vs tokens", points, "tokens in the window",
                     "relevance precision (items)"),
        "<h2>Where critical items sit (0 = start, 1 = end of the window)</h2>",
        _svg_scatter("critical item positions", position_points,
                     "relative position in the window (gold facts high, other items low)",
                     "gold fact"),
        "<h2>Runs and their rankers</h2>", _html_table(runs),
        "<h2>Arms side by side</h2>", _html_table(arms),
        "<h2>What the window keeps of what its pool holds</h2>",
        "<p>Definitions at the top of <code>sql/reports/window_recall.sql</code>.</p>",
        _html_table(recall),
        "<h2>§7.4 decision rule</h2>", _html_table(rule),
        "<h2>§7.5 ablation</h2>", _html_table(ablation),
        "<h2>§7.6 placement</h2>", _html_table(edges),
    ]
    style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}"
             "table{border-collapse:collapse;font-size:12px;margin-bottom:1em}"
             "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
             "th{background:#f0f0f0}svg{border:1px solid #eee;margin:.5em 0}")
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>ctxdb A/B</title>"
            f"<style>{style}</style></head><body>" + "".join(sections) + "</body></html>")
