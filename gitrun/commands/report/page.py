"""``gitrun report RUN``: one self-contained HTML page about a run.

A timeline of every attempt, concurrency over time, the summary numbers and a
sortable table of tasks, all drawn from what the run's branch holds
(:mod:`gitrun.commands.report.committed`), so the page is the same on any clone. Everything
is inline: CSS, SVG and a few lines of script; a Content-Security-Policy
forbids any fetch, so the page works from a file:// URL and as an attachment.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape
from pathlib import Path

from gitrun import __version__
from gitrun.commands.report.charts import (
    MAX_ROWS,
    Marker,
    Scale,
    clock,
    concurrency_svg,
    kind_class,
    timeline_svg,
)
from gitrun.commands.report.committed import CommittedRun, read_committed
from gitrun.commands.report.timeline import (
    KINDS,
    LOST,
    Attempt,
    canary_attempts,
    concurrency_over_time,
    needless_reruns,
    parse_time,
    read_attempts,
    recorded_allowed,
)
from gitrun.engine.budget import budget_of, money, per_usable, spend_text, tokens_text
from gitrun.engine.resumes import resumes_of
from gitrun.engine.states import DONE, FAILED, PENDING, UP_TO_DATE
from gitrun.engine.strays import WRITTEN, stray_writes
from gitrun.errors import GitrunError
from gitrun.resources import template_text
from gitrun.store import events, ledger
from gitrun.store.events import STOPPED, TIMED_OUT, Halt, Lift, Outcome
from gitrun.store.local import LocalPaths
from gitrun.store.tomlfile import write_atomic
from gitrun.visible import visible

# One colour per outcome, told apart with the common colour-vision deficiencies.
COLOURS = {
    Outcome.VALID: "#2a9d5c",
    Outcome.INVALID: "#d1495b",
    Outcome.MISSING: "#f0a03c",
    Outcome.THROTTLED: "#4a7fe0",
    TIMED_OUT: "#8e5bd1",
    LOST: "#5f6670",
    STOPPED: "#b9bec5",
}
OTHER_COLOUR = "#222222"  # an outcome this version does not know
STATUS_COLOURS = {
    DONE: COLOURS[Outcome.VALID],
    UP_TO_DATE: COLOURS[Outcome.VALID],
    FAILED: COLOURS[Outcome.INVALID],
    PENDING: "#8a8f98",
}
LISTED = 20  # tasks or violations named in the summary before "and N more"


def default_path(run_id: str) -> Path:
    """A name for a report in a folder of one's choosing (a default lives
    in the run's local state, :attr:`gitrun.store.local.LocalPaths.report`)."""
    return Path(f"gitrun-report-{run_id}.html")


def said_path(path: Path) -> str:
    """``path`` as a person at this directory opens it: relative when it is
    below here (``.git/gitrun/r/report.html``), else whole."""
    try:
        return path.relative_to(Path.cwd()).as_posix()
    except (ValueError, OSError):  # not below here, or here is gone
        return str(path)


def report_mark(run_id: str) -> str:
    """The line in every report's head that says which run's report it is:
    how a file is recognised as an earlier report that may be written over."""
    return f'<meta name="generator" content="gitrun report of run {run_id}">'


def is_report_of(data: bytes, run_id: str) -> bool:
    """Whether ``data`` (a file's first KiB is enough) is a report of ``run_id``."""
    return report_mark(run_id).encode() in data[:MARK_WITHIN]


MARK_WITHIN = 1024  # bytes from a report's start that hold its mark


def write_report(repo: Path, run_id: str, path: Path | None = None) -> Path:
    """Render the run's report and write it (default: with the run's local
    state, ``.git/gitrun/RUN/report.html``, so the work tree gets no file);
    the path written."""
    page = render_report(repo, run_id)
    target = path if path is not None else LocalPaths.of(repo, run_id).report
    try:
        if path is None:
            target.parent.mkdir(parents=True, exist_ok=True)  # a fresh clone has none
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
    canary = canary_attempts(attempts, run.limits.canary)
    task_ids = [task.id for task in run.tasks]
    conc = concurrency_over_time(attempts, run.limits, len(task_ids))
    changes = events.concurrency_changes(c.records)
    conc.allowed = recorded_allowed(conc.allowed, changes)
    markers = _markers(c.records, conc.takeovers)
    times = [a.start for a in attempts] + [a.end for a in attempts] + [m.at for m in markers]
    t0 = min(times, default=0.0)
    scale = Scale(t0, max([*times, t0 + 1.0]))
    timeline, per_row = timeline_svg(task_ids, attempts, canary, scale, markers, max_rows)
    started = datetime.fromtimestamp(t0, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    about = run.packet.run.description
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        report_mark(run.id),
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
        '<span class="key allowed"></span> allowed: the canary alone first, then each model '
        "bucket's concurrency as the governor changed it, from the ledger's records (down "
        'after a throttle <span class="key throttle"></span>, just under the ceiling it found, '
        "up again after valid endings and probes); "
        '<span class="key backoff"></span> back-off windows, drawn to their longest. The load '
        "gate, which holds starts back while the machine is busy, leaves no record in the "
        "ledger: where it held, fewer ran than were allowed.</p>",
        f'<div class="chart">{concurrency_svg(conc, scale, run.packet.limits.concurrency, markers)}'
        "</div>",
        _buckets(changes),
        "</section>",
        _table(c, attempts),
        f"<footer>gitrun {escape(__version__)}; the page needs no network.</footer>",
        f"<script>{template_text('report.js')}</script></body></html>\n",
    ]
    return "".join(parts)


def _buckets(changes: list[events.ConcurrencyChange]) -> str:
    """Each model bucket's last concurrency, ceiling estimate and why."""
    last = {change.bucket: change for change in changes}
    if not last:
        return ""
    rows = "".join(
        f"<tr><td><code>{escape(c.bucket)}</code></td><td>{c.concurrency}</td>"
        f"<td>{c.ceiling or '—'}</td><td>{escape(c.reason)}</td>"
        f"<td>{len([x for x in changes if x.bucket == c.bucket])}</td></tr>"
        for c in last.values()
    )
    return (
        '<table class="buckets"><thead><tr><th>model bucket</th><th>concurrency</th>'
        "<th>ceiling estimate</th><th>why it last changed</th><th>changes</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


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
    for record in ledger.typed(records):
        if not isinstance(record, Halt | Lift):
            continue
        at = parse_time(record.at)
        if at is None:
            continue
        if isinstance(record, Halt):
            said = visible(record.message)  # as status shows it
            markers.append(Marker(at, "halt", f"halt: {visible(record.kind)}", said))
        else:
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
    writes = stray_writes(c.records)
    violations = [w for w in writes if w.kind in WRITTEN]
    denied = [w for w in writes if w.kind not in WRITTEN]
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
        _number(
            UP_TO_DATE,
            f"{counts[UP_TO_DATE]:,}",
            "up to date",
            "not run: their outputs were made from the same inputs and definition before",
        ),
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
        _number(
            "violations",
            f"{len(violations):,}",
            "ownership violations",
            "writes outside every owned path, or into paths another task owns",
        ),
        _number("denied", f"{len(denied):,}", "writes denied", "writes the hooks stopped"),
        _number("throttles", f"{throttles:,}", "throttles", "attempts the API turned away"),
        _number(
            "lowest",
            str(lowest),
            "lowest concurrency",
            "the fewest attempts allowed at once after a throttle",
        ),
    ]
    spend_numbers, spend_lines = _spend(c, usable)
    numbers += spend_numbers
    lines = spend_lines
    resumed_numbers, resumed_lines = _resumed(c)
    numbers += resumed_numbers
    lines += resumed_lines
    if summary.halt:
        lines.append(
            f'<p class="halted">Halted: {escape(visible(summary.halt["message"]))} '
            f"(<code>gitrun retry {escape(c.run.id)}</code> lifts it)</p>"
        )
    if needless:
        lines.append(
            f"<p>A runner that trusts exit statuses would have re-run {len(needless):,} tasks "
            f"needlessly: {_some(needless)} (each wrote a valid output, then exited non-zero).</p>"
        )
    for label, listed in (("Ownership violation", violations), ("Write denied", denied)):
        for w in listed[:LISTED]:
            lines.append(f'<p class="violation">{label}: {escape(w.describe())}.</p>')
        if len(listed) > LISTED:
            lines.append(f"<p>... and {len(listed) - LISTED:,} more.</p>")
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


def _spend(c: CommittedRun, usable: int) -> tuple[list[str], list[str]]:
    """The spend's numbers (spent, per usable output, wasted, unknown, tokens)
    and its lines (the budget, tokens by model), from the committed ledger."""
    totals = ledger.usage_totals(c.records)
    budget = budget_of(c.run.limits, c.records)
    known = bool(totals.stage_costs)
    per = per_usable(totals, usable)
    numbers = [
        _number(
            "spent",
            money(totals.spent_usd) if known else "unknown",
            "spent",
            "the costs the clients stated; attempts of unknown cost are not counted",
        ),
        _number("per_usable", money(per) if per is not None else "n/a", "per usable output"),
        _number(
            "wasted",
            money(totals.wasted_usd) if known else "unknown",
            "wasted",
            "spent on attempts whose outputs were missing or invalid (or were throttled, "
            "interrupted or lost)",
        ),
        _number(
            "unknown_cost",
            f"{totals.unknown_cost:,}",
            "attempts of unknown cost",
            "their client stated no cost: not counted, never taken as zero",
        ),
        _number(
            "tokens",
            f"{totals.tokens:,}" if totals.by_model else "unknown",
            "tokens",
            "the tokens the clients stated; unknown when none stated any",
        ),
    ]
    lines = []
    said = spend_text(totals, usable, budget)
    if said:
        lines.append(f'<p class="spend">{escape(said[0].upper() + said[1:])}.</p>')
    by_model = tokens_text(totals)
    if by_model:
        lines.append(f'<p class="tokens">{escape(by_model[0].upper() + by_model[1:])}.</p>')
    return numbers, lines


def _resumed(c: CommittedRun) -> tuple[list[str], list[str]]:
    """The tries that continued a cut-off conversation and the turns they did
    not redo (numbers), what resuming saved and each such try, or a try that
    started fresh after a cut-off and why (lines); nothing in a run without."""
    resumes = resumes_of(c.records)
    if not resumes:
        return [], []
    numbers = [
        _number(
            "resumed",
            f"{len(resumes.continued):,}",
            "resumed tries",
            "tries that continued the conversation of a cut-off attempt",
        ),
        _number(
            "turns_not_redone",
            f"{resumes.turns:,}",
            "turns not redone",
            "the turns the continued conversations held (their clients' own files)",
        ),
    ]
    said = resumes.saved_text()
    lines = [f'<p class="resumed">{escape(said[0].upper() + said[1:])}.</p>']
    tries = resumes.tries
    items = "".join(f"<li>{escape(visible(t.describe()))}</li>" for t in tries[:LISTED])
    more = f"<li>... and {len(tries) - LISTED:,} more.</li>" if len(tries) > LISTED else ""
    lines.append(f'<ul class="resumed">{items}{more}</ul>')
    return numbers, lines


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
    last: dict[str, Attempt] = {}
    for a in attempts:
        per_task[a.task] = per_task.get(a.task, 0) + 1
        if a.task not in last or (a.number, a.throttles) >= (
            last[a.task].number,
            last[a.task].throttles,
        ):
            last[a.task] = a
    rows = []
    for task in c.run.tasks:
        status = c.status[task.id]
        outputs = " ".join(escape(o.path) for o in c.run.outputs_of(task))
        commit = c.commits.get(task.id, "")[:10]
        # A task not done: what its last attempt was, and why (as status says it).
        ended = last.get(task.id) if status not in (DONE, UP_TO_DATE) else None
        why = (
            f"{ended.kind}: {ended.reason}"
            if ended and ended.reason
            else (ended.kind if ended else "")
        )
        rows.append(
            f'<tr data-status="{status}"><td>{escape(task.id)}</td>'
            f"<td>{escape(c.run.stage_of(task))}</td><td>{per_task.get(task.id, 0)}</td>"
            f'<td class="s-{status}">{status}</td><td>{outputs}</td><td>{commit}</td>'
            f"<td>{escape(visible(why))}</td></tr>"
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
            ("last attempt", "text"),
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
    return kinds + statuses + template_text("report.css")
