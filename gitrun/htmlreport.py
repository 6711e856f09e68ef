"""``gitrun report RUN --html``: one self-contained HTML page about a run.

A timeline of every attempt, concurrency over time, the summary numbers and a
sortable table of tasks, all drawn from what the run's branch holds
(:mod:`gitrun.committed`), so the page is the same on any clone. Everything
is inline: CSS, SVG and a few lines of script; a Content-Security-Policy
forbids any fetch, so the page works from a file:// URL and as an attachment.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape
from pathlib import Path

from gitrun import __version__, ledger
from gitrun.committed import CommittedRun, read_committed
from gitrun.engine import DONE, FAILED, PENDING
from gitrun.errors import GitrunError
from gitrun.reportcharts import (
    MAX_ROWS,
    Marker,
    Scale,
    clock,
    concurrency_svg,
    kind_class,
    timeline_svg,
)
from gitrun.timeline import (
    KINDS,
    LOST,
    TIMED_OUT,
    Attempt,
    canary_attempts,
    concurrency_over_time,
    needless_reruns,
    parse_time,
    read_attempts,
)

# One colour per outcome, told apart with the common colour-vision deficiencies.
COLOURS = {
    ledger.VALID: "#2a9d5c",
    ledger.INVALID: "#d1495b",
    ledger.MISSING: "#f0a03c",
    ledger.THROTTLED: "#4a7fe0",
    TIMED_OUT: "#8e5bd1",
    LOST: "#5f6670",
    ledger.INTERRUPTED: "#b9bec5",
}
OTHER_COLOUR = "#222222"  # an outcome this version does not know
STATUS_COLOURS = {DONE: COLOURS[ledger.VALID], FAILED: COLOURS[ledger.INVALID], PENDING: "#8a8f98"}
LISTED = 20  # tasks or violations named in the summary before "and N more"


def default_path(run_id: str) -> Path:
    return Path(f"gitrun-report-{run_id}.html")


def write_report(repo: Path, run_id: str, path: Path | None = None) -> Path:
    """Render the run's report and write it (default: gitrun-report-RUN.html
    in the current directory); the path written."""
    from gitrun.tomlfile import write_atomic

    page = render_report(repo, run_id)
    target = path if path is not None else default_path(run_id)
    try:
        write_atomic(target, page.encode("utf-8"), durable=False)
        umask = os.umask(0o022)  # only to read it: a report is for sharing, not 0600
        os.umask(umask)
        target.chmod(0o666 & ~umask)
    except OSError as exc:
        raise GitrunError(
            f"{target}: cannot write the report ({exc.strerror or exc}); give a writable "
            "path with -o FILE"
        ) from exc
    return target


def render_report(repo: Path, run_id: str) -> str:
    """The report of the run at its branch's tip, as HTML text."""
    return render_page(read_committed(repo, run_id))


def render_page(c: CommittedRun, max_rows: int = MAX_ROWS) -> str:
    """The page; above ``max_rows`` tasks, consecutive tasks share a timeline row."""
    run = c.run
    attempts = read_attempts(c.records)
    canary = canary_attempts(attempts, run.packet.limits.canary)
    task_ids = [task.id for task in run.tasks]
    conc = concurrency_over_time(attempts, run.packet.limits, len(task_ids))
    markers = _markers(c.records, conc.takeovers)
    times = [a.start for a in attempts] + [a.end for a in attempts] + [m.at for m in markers]
    t0 = min(times, default=0.0)
    scale = Scale(t0, max([*times, t0 + 1.0]))
    timeline, per_row = timeline_svg(task_ids, attempts, canary, scale, markers, max_rows)
    started = datetime.fromtimestamp(t0, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    about = run.packet.run.description
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>gitrun report: {escape(run.id)}</title><style>{_css()}</style></head><body>",
        f"<header><h1>Run <code>{escape(run.id)}</code></h1>",
        f"<p>{escape(about)}</p>" if about else "",
        f'<p class="sub">Branch <code>{escape(c.ref)}</code> at <code>{c.tip[:10]}</code>'
        + (f"; first attempt {started}" if attempts else "; no attempt yet")
        + ". Everything here is read from the branch: its definition, its committed ledger "
        "and its commits.</p></header>",
        _summary(c, attempts, len(conc.throttles)),
        '<section id="timeline"><h2>Timeline</h2>',
        "<p>One row per task, one bar per attempt from its start to its end, coloured by "
        "outcome; hover a bar for its attempt, exit status, duration and reason.</p>",
        _legend(),
        _aggregated(len(task_ids), per_row, max_rows),
        f'<div class="chart">{timeline}</div></section>',
        '<section id="concurrency"><h2>Concurrency</h2>',
        '<p>Attempts <span class="key running"></span> running against '
        '<span class="key allowed"></span> allowed (the governor\'s rules replayed over the '
        'ledger: halved at each throttle <span class="key throttle"></span>, grown back '
        f"after {run.packet.limits.grow_after} valid endings, the canary alone first); "
        '<span class="key backoff"></span> back-off windows, drawn to their longest. The load '
        "gate, which holds starts back while the machine is busy, leaves no record in the "
        "ledger: where it held, fewer ran than were allowed.</p>",
        f'<div class="chart">{concurrency_svg(conc, scale, run.packet.limits.concurrency, markers)}'
        "</div></section>",
        _table(c, attempts),
        f"<footer>gitrun {escape(__version__)}; the page needs no network.</footer>",
        f"<script>{_JS}</script></body></html>\n",
    ]
    return "".join(parts)


def _markers(records: list[dict[str, object]], takeovers: list[float]) -> list[Marker]:
    markers = [
        Marker(
            at,
            "takeover",
            "new driver",
            "a driver took the run over here (the one before died or was stopped); it starts "
            "again from the packet's concurrency",
        )
        for at in takeovers
    ]
    for r in records:
        at = parse_time(r.get("at"))
        if at is None:
            continue
        if r.get("event") == ledger.HALT:
            kind = str(r.get("kind", "halt"))
            markers.append(Marker(at, "halt", f"halt: {kind}", str(r.get("message") or kind)))
        elif r.get("event") == ledger.LIFT:
            markers.append(Marker(at, "lift", "lifted", "`gitrun retry` lifted the halt"))
    return markers


def _number(key: str, value: str, label: str, note: str = "") -> str:
    title = f' title="{escape(note)}"' if note else ""
    return (
        f'<div class="num" data-key="{key}"{title}><b>{escape(value)}</b>'
        f"<span>{escape(label)}</span></div>"
    )


def _summary(c: CommittedRun, attempts: list[Attempt], throttles: int) -> str:
    counts = c.counts()
    summary = c.summary
    spawns = summary.spawns
    usable = counts[DONE]
    needless = needless_reruns(c.records)
    violations = [r for r in c.records if r.get("event") == "violation"]
    wall = max((a.end for a in attempts), default=0.0) - min(
        (a.start for a in attempts), default=0.0
    )
    lowest = min(
        (a.concurrency for a in attempts if a.concurrency is not None),
        default=c.run.packet.limits.concurrency,
    )
    numbers = [
        _number("tasks", f"{len(c.status):,}", "tasks"),
        _number(DONE, f"{counts[DONE]:,}", "done"),
        _number(FAILED, f"{counts[FAILED]:,}", "failed", "used up their attempts"),
        _number(PENDING, f"{counts[PENDING]:,}", "not done", "pending, or running now"),
        _number("spawns", f"{spawns:,}", "spawns", "attempts the ledger records"),
        _number("usable", f"{usable:,}", "usable outputs", "tasks whose outputs are committed"),
        _number("yield", f"{usable / spawns:.0%}" if spawns else "n/a", "yield", "usable / spawns"),
        _number("wall", clock(wall), "wall time", "first start to last end"),
        _number(
            "needless",
            f"{len(needless):,}",
            "needless re-runs",
            "tasks a runner trusting exit statuses would have re-run: they wrote valid output, "
            "then exited non-zero",
        ),
        _number("violations", f"{len(violations):,}", "ownership violations"),
        _number("throttles", f"{throttles:,}", "throttles", "attempts the API turned away"),
        _number(
            "lowest",
            str(lowest),
            "lowest concurrency",
            "the fewest attempts allowed at once after a throttle",
        ),
    ]
    lines = []
    if summary.halt:
        lines.append(
            f'<p class="halted">Halted: {escape(summary.halt["message"])} '
            f"(<code>gitrun retry {escape(c.run.id)}</code> lifts it)</p>"
        )
    if needless:
        lines.append(
            f"<p>A runner that trusts exit statuses would have re-run {len(needless):,} tasks "
            f"needlessly: {_some(needless)} (each wrote a valid output, then exited non-zero).</p>"
        )
    for r in violations[:LISTED]:
        running = ", ".join(str(t) for t in r.get("tasks") or []) or "no task"
        lines.append(
            f'<p class="violation">Ownership violation: <code>{escape(str(r.get("path")))}</code> '
            f"changed outside every owned path (running: {escape(running)}).</p>"
        )
    if len(violations) > LISTED:
        lines.append(f"<p>... and {len(violations) - LISTED:,} more violations.</p>")
    if counts[PENDING] and not summary.halt:
        lines.append(
            "<p>Tasks not done are pending or running: what runs now is machine-local state, "
            f"not a committed fact (<code>gitrun status {escape(c.run.id)}</code> tells).</p>"
        )
    return (
        f'<section id="summary"><h2>Summary</h2><div class="numbers">{"".join(numbers)}</div>'
        + "".join(lines)
        + "</section>"
    )


def _some(names: Sequence[str]) -> str:
    shown = ", ".join(escape(n) for n in names[:LISTED])
    return shown + (f" and {len(names) - LISTED:,} more" if len(names) > LISTED else "")


def _legend() -> str:
    items = [
        f'<span class="item"><svg width="14" height="10"><rect class="{kind_class(kind)}" '
        f'width="14" height="10"/></svg>{escape(kind)}</span>'
        for kind in KINDS
    ]
    items.append(
        '<span class="item"><svg width="14" height="10"><rect class="canary" width="14" '
        'height="10" fill="#fff"/></svg>canary</span>'
    )
    items.append(
        '<span class="item"><svg width="14" height="10"><rect class="lied" width="14" '
        'height="10" fill="#fff"/></svg>valid output, non-zero exit</span>'
    )
    return f'<p class="legend">{"".join(items)}</p>'


def _aggregated(tasks: int, per_row: int, max_rows: int) -> str:
    if per_row == 1:
        return ""
    return (
        f'<p class="aggregated">This run has {tasks:,} tasks: above {max_rows:,} the timeline '
        f"draws {per_row:,} consecutive tasks (in table order) per row, each row the union of "
        "their attempts by outcome, failures over successes; hover a row for its counts. The "
        "table below lists every task.</p>"
    )


def _table(c: CommittedRun, attempts: list[Attempt]) -> str:
    per_task: dict[str, int] = {}
    for a in attempts:
        per_task[a.task] = per_task.get(a.task, 0) + 1
    rows = []
    for task in c.run.tasks:
        status = c.status[task.id]
        outputs = " ".join(escape(o.path) for o in c.run.outputs_of(task))
        commit = c.commits.get(task.id, "")[:10]
        rows.append(
            f'<tr data-status="{status}"><td>{escape(task.id)}</td>'
            f"<td>{escape(c.run.stage_of(task))}</td><td>{per_task.get(task.id, 0)}</td>"
            f'<td class="s-{status}">{status}</td><td>{outputs}</td><td>{commit}</td></tr>'
        )
    head = "".join(
        f'<th data-type="{kind}" tabindex="0">{name}</th>'
        for name, kind in (
            ("task", "text"),
            ("stage", "text"),
            ("attempts", "num"),
            ("status", "text"),
            ("outputs", "text"),
            ("commit", "text"),
        )
    )
    return (
        '<section id="tasks"><h2>Tasks</h2><p>Click a heading to sort; type to filter. '
        "The commit is the newest one on the branch that landed the task's outputs.</p>"
        '<input id="filter" type="search" placeholder="filter tasks" aria-label="filter tasks">'
        f'<table id="task-table" class="sortable"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></section>"
    )


def _css() -> str:
    kinds = f".bar{{fill:{OTHER_COLOUR}}}"
    kinds += "".join(f".{kind_class(k)}{{fill:{colour}}}" for k, colour in COLOURS.items())
    statuses = "".join(f".s-{s}{{color:{colour}}}" for s, colour in STATUS_COLOURS.items())
    return kinds + statuses + _CSS


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;
max-width:1140px;padding:0 12px;color:#1d232b;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
code{font:12px ui-monospace,monospace;background:#f2f4f7;padding:1px 4px;border-radius:3px}
.sub{color:#555}.numbers{display:flex;flex-wrap:wrap;gap:8px}
.num{border:1px solid #dde1e6;border-radius:6px;padding:6px 10px;min-width:96px}
.num b{display:block;font-size:20px}.num span{color:#555;font-size:12px}
.halted,.violation{color:#a3162b}.aggregated{background:#fff6db;padding:6px 10px}
.chart{overflow-x:auto}.chart svg{max-width:100%;height:auto}svg text{font:11px system-ui,sans-serif;fill:#333}
.label{text-anchor:end}.tick{text-anchor:middle;fill:#666}
.grid{stroke:#eceef1;stroke-width:1}.bar{fill-opacity:.95}
.bar:hover{stroke:#000;stroke-width:1}
.canary{stroke:#d4a000;stroke-width:2}.lied{stroke:#111;stroke-width:1.5;stroke-dasharray:3 2}
.canary-band rect{fill:#fff3c4;fill-opacity:.6}.canary-band text{fill:#8a6a00}
.halt line{stroke:#a3162b;stroke-width:2;stroke-dasharray:6 3}.halt text{fill:#a3162b}
.lift line{stroke:#2a9d5c;stroke-width:2;stroke-dasharray:2 3}.lift text{fill:#2a9d5c}
.takeover line{stroke:#5f6670;stroke-width:1.5;stroke-dasharray:4 3}.takeover text{fill:#5f6670}
.running{fill:#9cc0f5;fill-opacity:.7}.allowed{fill:none;stroke:#1d232b;stroke-width:2}
.backoff{fill:#f6b3bd;fill-opacity:.35}.throttle{fill:#d1495b}
.key{display:inline-block;width:14px;height:10px;vertical-align:middle}
.key.running{background:#9cc0f5}.key.allowed{border-top:2px solid #1d232b;height:0}
.key.throttle{background:#d1495b}.key.backoff{background:#f6b3bd}
.legend .item{margin-right:14px;white-space:nowrap}.legend svg{vertical-align:middle;margin-right:4px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:3px 8px;border-bottom:1px solid #eceef1}
th{cursor:pointer;user-select:none;background:#f7f8fa;position:sticky;top:0}
th[aria-sort=ascending]::after{content:" \\25B2"}th[aria-sort=descending]::after{content:" \\25BC"}
td:nth-child(5),td:nth-child(6){font-family:ui-monospace,monospace;font-size:12px}
#filter{margin:0 0 8px;padding:4px 8px;width:260px}
footer{margin-top:24px;color:#777;font-size:12px}
"""

# Sorts the table by a clicked heading (numbers as numbers) and filters its rows.
_JS = """
(function(){
var table=document.getElementById('task-table');var body=table.tBodies[0];
var heads=table.tHead.rows[0].cells;
function sortBy(i){var th=heads[i];var up=th.getAttribute('aria-sort')!=='ascending';
for(var h=0;h<heads.length;h++){heads[h].removeAttribute('aria-sort');}
th.setAttribute('aria-sort',up?'ascending':'descending');
var num=th.getAttribute('data-type')==='num';var rows=Array.prototype.slice.call(body.rows);
rows.sort(function(a,b){var x=a.cells[i].textContent,y=b.cells[i].textContent;
var d=num?(Number(x)-Number(y)):x.localeCompare(y,undefined,{numeric:true});
return up?d:-d;});
var frag=document.createDocumentFragment();rows.forEach(function(r){frag.appendChild(r);});
body.appendChild(frag);}
Array.prototype.forEach.call(heads,function(th,i){
th.addEventListener('click',function(){sortBy(i);});
th.addEventListener('keydown',function(e){if(e.key==='Enter'){sortBy(i);}});});
var filter=document.getElementById('filter');
filter.addEventListener('input',function(){var q=filter.value.toLowerCase();
Array.prototype.forEach.call(body.rows,function(r){
r.style.display=r.textContent.toLowerCase().indexOf(q)<0?'none':'';});});
})();
"""
