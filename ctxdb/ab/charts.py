"""The HTML report's plots as inline SVG: no script, no stylesheet from elsewhere, no
dependency. Each plot has axes with ticks and a label naming the unit; its colours are
explained by a legend (``legend``) printed above it.

Values are mapped with ``Scale``; tick positions come from ``nice_ticks`` (1, 2, 2.5 or 5
times a power of ten), tick labels from ``formats.format_tick``.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

from .formats import format_tick

TICK_LENGTH = 4
TARGET_TICKS = 5  # about this many ticks on an axis
NICE_STEPS = (1.0, 2.0, 2.5, 5.0, 10.0)
FONT = 'font-family="system-ui,sans-serif"'
AXIS_COLOR = "#555"
GRID_COLOR = "#e2e2e2"
OTHER_COLOR = "#555"  # outline of the placement plot's other items
EDGE_ZONE_COLOR = "#f3efe0"
BAR_ROW_HEIGHT = 22  # px per bar of the bar chart
BAR_LABEL_WIDTH = 250  # px left of the bars for their labels (arm/variant names)
BAR_VALUE_WIDTH = 72  # px right of the longest bar for its value
EDGE_LOW, EDGE_HIGH = 0.25, 0.75  # edge_placement.sql: an edge is outside the middle half
LINE_WIDTH = 2  # px of a line chart's line
LINE_DASH = "6 3"  # a dashed line's dash and gap, px
LINE_DOT_RADIUS = 2.5  # px of a line's point markers


def nice_ticks(top: float, target: int = TARGET_TICKS) -> list[float]:
    """Ticks from 0 to at least ``top``, a round step apart."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / target
    power = 10 ** math.floor(math.log10(raw))
    step = next(s * power for s in NICE_STEPS if s * power >= raw)
    count = math.ceil(top / step - 1e-9)
    return [n * step for n in range(count + 1)]


@dataclass(frozen=True)
class Scale:
    """Maps [low, high] onto pixels [start, end] (end < start for a y axis)."""
    low: float
    high: float
    start: float
    end: float

    def __call__(self, value: float) -> float:
        span = (self.high - self.low) or 1.0
        return self.start + (self.end - self.start) * (value - self.low) / span


@dataclass(frozen=True)
class Frame:
    """A plot's size and the margins that hold its axes' labels."""
    width: int
    height: int
    left: int = 64
    right: int = 16
    top: int = 12
    bottom: int = 44

    @property
    def x_range(self) -> tuple[float, float]:
        return self.left, self.width - self.right

    @property
    def y_range(self) -> tuple[float, float]:
        return self.height - self.bottom, self.top


def _text(x: float, y: float, content: str, size: int = 11, anchor: str = "middle",
          extra: str = "") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'{FONT}{extra}>{html.escape(content)}</text>')


def _open(frame: Frame, title: str, css_class: str) -> str:
    return (f'<svg class="{css_class}" width="{frame.width}" height="{frame.height}" '
            f'viewBox="0 0 {frame.width} {frame.height}" role="img">'
            f"<title>{html.escape(title)}</title>")


def x_axis(frame: Frame, scale: Scale, ticks: list[float], label: str,
           percent: bool = False) -> str:
    y = frame.height - frame.bottom
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    parts = [f'<line x1="{frame.left}" y1="{y}" x2="{frame.width - frame.right}" y2="{y}" '
             f'stroke="{AXIS_COLOR}"/>']
    for tick in ticks:
        x = scale(tick)
        parts.append(f'<line class="tick" x1="{x:.1f}" y1="{y}" x2="{x:.1f}" '
                     f'y2="{y + TICK_LENGTH}" stroke="{AXIS_COLOR}"/>')
        parts.append(_text(x, y + TICK_LENGTH + 12, format_tick(tick, step, percent),
                           extra=' class="tick-label"'))
    parts.append(_text((frame.left + frame.width - frame.right) / 2, frame.height - 8, label,
                       extra=' class="axis-label"'))
    return "".join(parts)


def y_axis(frame: Frame, scale: Scale, ticks: list[float], label: str,
           percent: bool = False) -> str:
    """The y axis, its ticks, and a light grid line at each tick."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    bottom, top = frame.y_range
    parts = [f'<line x1="{frame.left}" y1="{top}" x2="{frame.left}" y2="{bottom}" '
             f'stroke="{AXIS_COLOR}"/>']
    for tick in ticks:
        y = scale(tick)
        parts.append(f'<line x1="{frame.left}" y1="{y:.1f}" x2="{frame.width - frame.right}" '
                     f'y2="{y:.1f}" stroke="{GRID_COLOR}"/>')
        parts.append(f'<line class="tick" x1="{frame.left - TICK_LENGTH}" y1="{y:.1f}" '
                     f'x2="{frame.left}" y2="{y:.1f}" stroke="{AXIS_COLOR}"/>')
        parts.append(_text(frame.left - TICK_LENGTH - 3, y + 4, format_tick(tick, step, percent),
                           anchor="end", extra=' class="tick-label"'))
    middle = (top + bottom) / 2
    parts.append(_text(14, middle, label, extra=f' class="axis-label" '
                       f'transform="rotate(-90 14 {middle:.1f})"'))
    return "".join(parts)


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    color: str
    value_text: str  # as the tables write it


def horizontal_bars(title: str, bars: list[Bar], x_label: str, width: int) -> str:
    """One bar per row, its label on the left and its value at its end."""
    base = Frame(width, 0)
    frame = Frame(width, base.top + base.bottom + BAR_ROW_HEIGHT * max(len(bars), 1),
                  left=BAR_LABEL_WIDTH, right=BAR_VALUE_WIDTH)
    ticks = nice_ticks(max([b.value for b in bars] + [0.0]))
    scale = Scale(0, ticks[-1], *frame.x_range)
    parts = [_open(frame, title, "chart bars")]
    for tick in ticks:  # vertical grid lines behind the bars
        x = scale(tick)
        parts.append(f'<line x1="{x:.1f}" y1="{frame.top}" x2="{x:.1f}" '
                     f'y2="{frame.height - frame.bottom}" stroke="{GRID_COLOR}"/>')
    for n, bar in enumerate(bars):
        y = frame.top + n * BAR_ROW_HEIGHT
        end = scale(bar.value)
        parts.append(_text(frame.left - 8, y + BAR_ROW_HEIGHT / 2 + 4, bar.label, size=12,
                           anchor="end"))
        parts.append(f'<rect x="{frame.left}" y="{y + 3}" width="{end - frame.left:.1f}" '
                     f'height="{BAR_ROW_HEIGHT - 6}" fill="{bar.color}">'
                     f"<title>{html.escape(f'{bar.label}: {bar.value_text}')}</title></rect>")
        parts.append(_text(end + 5, y + BAR_ROW_HEIGHT / 2 + 4, bar.value_text, anchor="start"))
    parts.append(x_axis(frame, scale, ticks, x_label))
    parts.append(f'<line x1="{frame.left}" y1="{frame.top}" x2="{frame.left}" '
                 f'y2="{frame.height - frame.bottom}" stroke="{AXIS_COLOR}"/>')
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    color: str
    label: str  # the hover text


def scatter(title: str, points: list[Point], x_label: str, y_label: str, width: int,
            height: int, y_top: float | None = None) -> str:
    """Points on a plane; y runs from 0 to ``y_top`` (default: the data's nice top)."""
    frame = Frame(width, height, right=36)  # room for the last tick's label
    x_ticks = nice_ticks(max([p.x for p in points] + [0.0]))
    y_ticks = nice_ticks(y_top if y_top is not None else max([p.y for p in points] + [0.0]))
    x_scale = Scale(0, x_ticks[-1], *frame.x_range)
    y_scale = Scale(0, y_ticks[-1], *frame.y_range)
    parts = [_open(frame, title, "chart scatter"), y_axis(frame, y_scale, y_ticks, y_label),
             x_axis(frame, x_scale, x_ticks, x_label)]
    for point in points:
        parts.append(f'<circle cx="{x_scale(point.x):.1f}" cy="{y_scale(point.y):.1f}" r="4" '
                     f'fill="{point.color}" fill-opacity="0.6" stroke="{point.color}">'
                     f"<title>{html.escape(point.label)}</title></circle>")
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True)
class Series:
    """One line of a line chart: its points in x order (each point's label is its hover
    text), drawn in ``color``; ``dashed`` tells it apart without its colour."""
    label: str
    color: str
    points: list[Point]
    dashed: bool = False


def line_chart(title: str, series: list[Series], x_label: str, y_label: str, width: int,
               height: int) -> str:
    """Lines over a shared plane, both axes from 0 to the data's nice top; each point a
    dot that names its values on hover."""
    frame = Frame(width, height, right=36)  # room for the last tick's label
    points = [p for s in series for p in s.points]
    x_ticks = nice_ticks(max([p.x for p in points] + [0.0]))
    y_ticks = nice_ticks(max([p.y for p in points] + [0.0]))
    x_scale = Scale(0, x_ticks[-1], *frame.x_range)
    y_scale = Scale(0, y_ticks[-1], *frame.y_range)
    parts = [_open(frame, title, "chart lines"), y_axis(frame, y_scale, y_ticks, y_label),
             x_axis(frame, x_scale, x_ticks, x_label)]
    for line in series:
        dash = f' stroke-dasharray="{LINE_DASH}"' if line.dashed else ""
        coordinates = " ".join(f"{x_scale(p.x):.1f},{y_scale(p.y):.1f}" for p in line.points)
        parts.append(f'<polyline points="{coordinates}" fill="none" stroke="{line.color}" '
                     f'stroke-width="{LINE_WIDTH}"{dash}>'
                     f"<title>{html.escape(line.label)}</title></polyline>")
        for point in line.points:
            parts.append(f'<circle cx="{x_scale(point.x):.1f}" cy="{y_scale(point.y):.1f}" '
                         f'r="{LINE_DOT_RADIUS}" fill="{point.color}">'
                         f"<title>{html.escape(point.label)}</title></circle>")
    parts.append("</svg>")
    return "".join(parts)


def placement_panel(title: str, subtitle: str, critical: list[float], others: list[float],
                    color: str, y_top: float, width: int, height: int) -> str:
    """One arm/variant's placement: per bin of the window (0 = start, 1 = end) the share
    of its critical items there (bars) and of its other evidence items (outline); the
    window's first and last quarter — the edges of §7.6 — are shaded."""
    frame = Frame(width, height, left=48, right=20, bottom=40, top=40)
    bins = len(critical)
    x_scale = Scale(0, 1, *frame.x_range)
    y_ticks = nice_ticks(y_top, target=4)
    y_scale = Scale(0, y_ticks[-1], *frame.y_range)
    bottom, top = frame.y_range
    parts = [_open(frame, title, "chart placement")]
    for low, high in ((0.0, EDGE_LOW), (EDGE_HIGH, 1.0)):
        parts.append(f'<rect class="edge-zone" x="{x_scale(low):.1f}" y="{top}" '
                     f'width="{x_scale(high) - x_scale(low):.1f}" height="{bottom - top}" '
                     f'fill="{EDGE_ZONE_COLOR}"/>')
    parts.append(y_axis(frame, y_scale, y_ticks, "share of items", percent=True))
    parts.append(x_axis(frame, x_scale, [0, 0.25, 0.5, 0.75, 1.0],
                        "position in the window (0 = start, 1 = end)"))
    for n, share in enumerate(critical):
        x0, x1 = x_scale(n / bins), x_scale((n + 1) / bins)
        y = y_scale(share)
        parts.append(f'<rect x="{x0 + 1:.1f}" y="{y:.1f}" width="{x1 - x0 - 2:.1f}" '
                     f'height="{bottom - y:.1f}" fill="{color}" fill-opacity="0.85">'
                     f"<title>{n / bins:.2f}–{(n + 1) / bins:.2f}: "
                     f"{100 * share:.1f}% of critical items</title></rect>")
    if any(others):
        path = [f"M{x_scale(0):.1f},{bottom}"]
        for n, share in enumerate(others):
            path.append(f"L{x_scale(n / bins):.1f},{y_scale(share):.1f}"
                        f"L{x_scale((n + 1) / bins):.1f},{y_scale(share):.1f}")
        path.append(f"L{x_scale(1):.1f},{bottom}")
        parts.append(f'<path d="{"".join(path)}" fill="none" stroke="{OTHER_COLOR}" '
                     f'stroke-width="1.2" stroke-dasharray="3 2"/>')
    parts.append(_text(frame.left, 15, title, size=12, anchor="start",
                       extra=' font-weight="600"'))
    parts.append(_text(frame.left, 30, subtitle, anchor="start"))
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True)
class LegendEntry:
    label: str
    color: str
    arm: str | None = None  # the arm it names, for readers and tests
    style: str = "swatch"  # swatch, outline or zone


def legend(entries: list[LegendEntry]) -> str:
    items = []
    for entry in entries:
        arm = f' data-arm="{html.escape(entry.arm)}"' if entry.arm else ""
        items.append(f'<span class="legend-entry"{arm}><i class="{entry.style}" '
                     f'style="--key:{entry.color}"></i>{html.escape(entry.label)}</span>')
    return f'<div class="legend">{"".join(items)}</div>'
