"""The report's two charts as inline SVG text: the timeline of attempts, and
concurrency over time. Drawn from Python so the page needs no script, no
library and no network to show them (docs/ledger.md, "The report")."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from html import escape

from gitrun.commands.report.timeline import Attempt, Concurrency
from gitrun.store.events import STOPPED, Outcome
from gitrun.visible import visible

WIDTH = 1100
LEFT = 150  # room for the row labels
RIGHT = 16
MAX_ROWS = 300  # above this many tasks, consecutive tasks share a row
ROW_TALL = 16  # px per row up to TALL_UP_TO rows; ROW_SHORT beyond
ROW_SHORT = 8
TALL_UP_TO = 60
AXIS = 26  # px under a chart for its time axis


@dataclass(frozen=True)
class Scale:
    """Seconds since the epoch to x, over the run's span."""

    t0: float
    t1: float

    def x(self, t: float) -> float:
        span = max(self.t1 - self.t0, 1e-6)
        return LEFT + (t - self.t0) / span * (WIDTH - LEFT - RIGHT)


@dataclass(frozen=True)
class Marker:
    """A vertical line across both charts: a halt, or its lifting."""

    at: float
    css: str  # "halt" or "lift"
    label: str
    title: str


def _f(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _title(text: str) -> str:
    return f"<title>{escape(text, quote=False)}</title>"


def clock(seconds: float) -> str:
    """A duration as people read it: 45 s, 2 min 05 s, 1 h 02 min."""
    if seconds < 60:
        return (
            f"{seconds:.1f} s" if seconds < 10 and seconds != int(seconds) else f"{seconds:.0f} s"
        )
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min" + (f" {secs:02d} s" if secs else "")
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h" + (f" {minutes:02d} min" if minutes else "")


def _ticks(scale: Scale) -> list[float]:
    span = scale.t1 - scale.t0
    steps = [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600]
    steps += [7200, 10800, 21600, 43200, 86400]
    step = next((s for s in steps if span / s <= 10), 10 ** math.ceil(math.log10(span / 10)))
    return [i * step for i in range(int(span / step) + 1)]


def _axis(scale: Scale, top: float, bottom: float) -> str:
    parts = []
    for offset in _ticks(scale):
        x = _f(scale.x(scale.t0 + offset))
        parts.append(f'<line class="grid" x1="{x}" x2="{x}" y1="{_f(top)}" y2="{_f(bottom)}"/>')
        parts.append(f'<text class="tick" x="{x}" y="{_f(bottom + 16)}">{clock(offset)}</text>')
    return "".join(parts)


def _markers(markers: list[Marker], scale: Scale, top: float, bottom: float) -> str:
    parts = []
    placed: list[float] = []  # x of the labels on each line of labels
    for m in sorted(markers, key=lambda m: m.at):
        at = scale.x(m.at)
        # A label goes on the first line where it clears the one before it.
        line = next((i for i, x in enumerate(placed) if at - x > 140), len(placed))
        placed[line : line + 1] = [at]
        x = _f(at)
        parts.append(
            f'<g class="marker {m.css}">{_title(m.title)}'
            f'<line x1="{x}" x2="{x}" y1="{_f(top)}" y2="{_f(bottom)}"/>'
            f'<text x="{x}" y="{_f(top + 11 + 12 * line)}" dx="4">{escape(m.label)}</text></g>'
        )
    return "".join(parts)


def kind_class(kind: str) -> str:
    return "k-" + "-".join(kind.split())


def attempt_title(a: Attempt, t0: float, canary: bool) -> str:
    how = f"signal {a.signal}" if a.signal else (f"exit {a.exit}" if a.exit is not None else "")
    text = f"{a.named}: {a.kind}"
    if how:
        text += f", {how}"
    if a.lied:
        text += " (wrote valid output, then exited non-zero)"
    text += f"; {clock(a.end - a.start)}, from +{clock(a.start - t0)}"
    if canary:
        text += "; canary"
    if a.recovered:
        text += "; recorded by the driver that took over"
    if a.concurrency is not None:
        text += f"; concurrency backed off to {a.concurrency}"
    if a.reason:
        text += f"\n{visible(a.reason[:300])}"
    for line in a.said:
        text += f"\nit said: {visible(line)}"
    return text


def timeline_svg(
    task_ids: list[str],
    attempts: list[Attempt],
    canary: set[tuple[str, int, int]],
    scale: Scale,
    markers: list[Marker],
    max_rows: int = MAX_ROWS,
) -> tuple[str, int]:
    """The timeline, and how many tasks share a row (1: a row per task)."""
    per_row = max(1, math.ceil(len(task_ids) / max_rows))
    row_of = {tid: i // per_row for i, tid in enumerate(task_ids)}
    rows = math.ceil(len(task_ids) / per_row) if task_ids else 0
    row_h = ROW_TALL if rows <= TALL_UP_TO else ROW_SHORT
    top = 18
    height = top + rows * row_h + AXIS
    bottom = top + rows * row_h
    parts = [
        f'<svg id="timeline-chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} '
        f'{height}" width="{WIDTH}" height="{height}" role="img" '
        f'aria-label="one row per {"task" if per_row == 1 else f"{per_row} tasks"}, one bar '
        'per attempt">'
    ]
    parts.append(_axis(scale, top, bottom))
    canary_spans = [a for a in attempts if (a.task, a.number, a.throttles) in canary]
    if canary_spans:
        x0 = scale.x(min(a.start for a in canary_spans))
        x1 = scale.x(max(a.end for a in canary_spans))
        parts.append(
            f'<g class="canary-band">{_title("the canary: these attempts ran alone first")}'
            f'<rect x="{_f(x0)}" y="{top}" width="{_f(max(x1 - x0, 1))}" height="{bottom - top}"/>'
            f'<text x="{_f(x0)}" y="{top - 5}">canary</text></g>'
        )
    label_every = 1 if row_h >= 12 else 4
    for r in range(rows):
        if r % label_every == 0:
            ids = task_ids[r * per_row : (r + 1) * per_row]
            label = ids[0] if per_row == 1 else f"{ids[0]} – {ids[-1]}"
            y = top + r * row_h + row_h * 0.75
            parts.append(
                f'<text class="label" x="{LEFT - 6}" y="{_f(y)}">{escape(_short(label))}</text>'
            )
    if per_row == 1:
        parts += _bars(attempts, row_of, row_h, top, scale, canary)
    else:
        parts += _merged_bars(attempts, row_of, row_h, top, scale, task_ids, per_row)
    parts.append(_markers(markers, scale, top, bottom))
    parts.append("</svg>")
    return "".join(parts), per_row


def _short(label: str, limit: int = 24) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


def _bars(
    attempts: list[Attempt],
    row_of: dict[str, int],
    row_h: int,
    top: int,
    scale: Scale,
    canary: set[tuple[str, int, int]],
) -> list[str]:
    parts = []
    pad = 2 if row_h >= 12 else 1
    for a in attempts:
        row = row_of.get(a.task)
        if row is None:
            continue  # a task the definition no longer lists
        x = scale.x(a.start)
        w = max(scale.x(a.end) - x, 1.5)
        classes = ["bar", kind_class(a.kind)]
        is_canary = (a.task, a.number, a.throttles) in canary
        if is_canary:
            classes.append("canary")
        if a.lied:
            classes.append("lied")
        parts.append(
            f'<rect class="{" ".join(classes)}" data-task="{escape(a.task)}" '
            f'data-attempt="{a.number}" data-throttles="{a.throttles}" '
            f'data-kind="{escape(a.kind)}" x="{_f(x)}" '
            f'y="{top + row * row_h + pad}" width="{_f(w)}" height="{row_h - 2 * pad}">'
            f"{_title(attempt_title(a, scale.t0, is_canary))}</rect>"
        )
    return parts


def _merged_bars(
    attempts: list[Attempt],
    row_of: dict[str, int],
    row_h: int,
    top: int,
    scale: Scale,
    task_ids: list[str],
    per_row: int,
) -> list[str]:
    """Rows of several tasks: per row and kind, the union of their attempts'
    spans (to the pixel), failures drawn over successes."""
    spans: dict[tuple[int, str], list[tuple[float, float]]] = {}
    counts: dict[int, dict[str, int]] = {}
    for a in attempts:
        row = row_of.get(a.task)
        if row is None:
            continue
        spans.setdefault((row, a.kind), []).append((scale.x(a.start), scale.x(a.end)))
        kinds = counts.setdefault(row, {})
        kinds[a.kind] = kinds.get(a.kind, 0) + 1
    order = {kind: i for i, kind in enumerate([Outcome.VALID, STOPPED])}
    parts = []
    for row in sorted(counts):
        ids = task_ids[row * per_row : (row + 1) * per_row]
        said = ", ".join(f"{n} {k}" for k, n in sorted(counts[row].items()))
        parts.append(f'<g class="row">{_title(f"{ids[0]} – {ids[-1]}: {said}")}')
        for kind in sorted(counts[row], key=lambda k: order.get(k, -1), reverse=True):
            for x0, x1 in _union(spans[(row, kind)]):
                parts.append(
                    f'<rect class="bar {kind_class(kind)}" data-kind="{escape(kind)}" '
                    f'x="{_f(x0)}" y="{top + row * row_h + 1}" width="{_f(max(x1 - x0, 1.5))}" '
                    f'height="{row_h - 2}"/>'
                )
        parts.append("</g>")
    return parts


def _union(spans: Iterable[tuple[float, float]], gap: float = 0.5) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for x0, x1 in sorted(spans):
        if merged and x0 <= merged[-1][1] + gap:
            merged[-1] = (merged[-1][0], max(merged[-1][1], x1))
        else:
            merged.append((x0, x1))
    return merged


def concurrency_svg(c: Concurrency, scale: Scale, limit: int, markers: list[Marker]) -> str:
    """Running (area) against allowed (line), throttles (marks) and back-off windows."""
    top, plot = 18, 160
    bottom = top + plot
    peak = max([limit, *(v for _, v in c.running), *(v for _, v in c.allowed)])

    def y(value: float) -> float:
        return bottom - value / peak * (plot - 4)

    parts = [
        f'<svg id="concurrency-chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} '
        f'{bottom + AXIS}" width="{WIDTH}" height="{bottom + AXIS}" role="img" '
        'aria-label="attempts running against attempts allowed">'
    ]
    parts.append(_axis(scale, top, bottom))
    for value in sorted({0, limit, peak}):
        parts.append(
            f'<text class="label" x="{LEFT - 6}" y="{_f(y(value) + 4)}">{value}</text>'
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{_f(y(value))}" '
            f'y2="{_f(y(value))}"/>'
        )
    for start, end in c.backoffs:
        x0, x1 = scale.x(start), scale.x(end)
        parts.append(
            f'<rect class="backoff" x="{_f(x0)}" y="{top}" width="{_f(max(x1 - x0, 1))}" '
            f'height="{plot}">{_title(f"back-off after a throttle: at most {clock(end - start)}")}'
            "</rect>"
        )
    end_x = scale.x(scale.t1)
    if c.running:
        path = _step_path(c.running, scale, y, end_x)
        parts.append(
            f'<path class="running" d="{path} V {_f(y(0))} H {_f(scale.x(c.running[0][0]))} Z"/>'
        )
    if c.allowed:
        parts.append(f'<path class="allowed" d="{_step_path(c.allowed, scale, y, end_x)}"/>')
    for a in c.throttles:
        x = scale.x(a.end)
        after = f"; concurrency backed off to {a.concurrency}" if a.concurrency else ""
        parts.append(
            f'<path class="throttle" d="M {_f(x - 4)} {top - 8} h 8 l -4 7 z">'
            f"{_title(f'{a.named} throttled at +{clock(a.end - scale.t0)}{after}')}"
            "</path>"
        )
    parts.append(_markers(markers, scale, top, bottom))
    parts.append("</svg>")
    return "".join(parts)


def _step_path(
    points: list[tuple[float, int]], scale: Scale, y: Callable[[float], float], end_x: float
) -> str:
    """A step line through (time, value) points; changes that fall within one
    pixel keep their peak, so 20,000 steps draw as at most ~1,000."""
    out: list[str] = []
    last_px: int | None = None
    peak = last = 0
    for t, value in points:
        px = round(scale.x(t))
        if px == last_px:
            peak, last = max(peak, value), value
            continue
        if last_px is not None:
            out.append(f"V {_f(y(peak))} V {_f(y(last))} H {px}")
        else:
            out.append(f"M {px} {_f(y(value))}")
        last_px, peak, last = px, value, value
    out.append(f"V {_f(y(peak))} V {_f(y(last))} H {_f(end_x)}")
    return " ".join(out)
