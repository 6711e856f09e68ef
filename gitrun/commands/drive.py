"""What ``gitrun start``, ``resume``, ``status`` and ``ls`` print, and their exit codes.

Results go to stdout; the driver's events go to stderr, one plain line each
(a live view instead, on a terminal). A reader that goes away (``gitrun
status | head``) loses the output, never the run.
"""

from __future__ import annotations

import json
import os
import sys
from functools import partial
from pathlib import Path

from gitrun.commands.external import drive_external
from gitrun.commands.summary import format_status, format_status_line, format_summary
from gitrun.engine.status import read_status, where
from gitrun.store.local import LocalPaths
from gitrun.visible import visible
from gitrun.words import counted


def event(line: str) -> None:
    """One plain line per driver event, on stderr (stdout stays for results).
    A reader that went away (`gitrun start r 2>&1 | head -1`) loses the
    lines, never the run: a write failing here would stop the driver
    between launching attempts and recording them. The line is made
    visible: it may carry a worker's words or a file name a worker chose."""
    try:
        sys.stderr.write(f"gitrun: {visible(line)}\n")
        sys.stderr.flush()
    except BrokenPipeError:
        silence(sys.stderr)


def silence(stream: object) -> None:
    """Point ``stream``'s descriptor at /dev/null, so what is still buffered,
    and every later write, goes nowhere instead of failing again (at exit too)."""
    fileno = getattr(stream, "fileno", None)
    if fileno is None:
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fileno())
    except (OSError, ValueError):
        pass  # a stream without a descriptor: nothing to point elsewhere
    finally:
        os.close(devnull)


def drive(
    repo: Path,
    run: str,
    as_json: bool,
    quiet: bool,
    resume: bool,
    rerun_all: bool = False,
    take_edits: bool = False,
    full: bool = False,
) -> int:
    """``gitrun start`` or ``resume``: its exit code. A command-mode run is
    driven to its end; an external run prints its first batch. ``rerun_all``
    (start only): run every task, up to date or not."""
    # deferred: status (<= 25x `python -c pass`) imports this module, not start
    from gitrun.commands.session import open_run, resume_run, start_run

    loaded = open_run(repo, run, resume, event)
    if loaded.executor_kind == "external":
        return drive_external(repo, run, as_json, resume, event, rerun_all, take_edits, full)
    # resume loads the definition again under the lock, after restoring it
    drive_run = (
        partial(resume_run, take_edits=take_edits)
        if resume
        else partial(start_run, loaded=loaded, rerun_all=rerun_all)
    )
    if quiet or as_json:
        outcome = drive_run(repo, run, lambda _line: None)
    elif sys.stderr.isatty() and sys.stdout.isatty():
        from gitrun.commands.live import LiveView

        with LiveView(run) as view:
            outcome = drive_run(repo, run, view.event, view.progress)
    else:
        outcome = drive_run(repo, run, event)
    if as_json:
        data = outcome.status.to_json()
        data["exit_code"] = outcome.exit_code
        data["stopped_by"] = outcome.stopped_by
        data["halt"] = (
            {"kind": outcome.halt.kind, "message": outcome.halt.message} if outcome.halt else None
        )
        data["load_held_seconds"] = round(outcome.load_held, 1)
        text = json.dumps(data, indent=2, allow_nan=False)
    else:
        text = format_summary(outcome.status, outcome.stopped_by, outcome.halt, outcome.load_held)
    try:
        sys.stdout.write(visible(text, lines=True) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # `gitrun start r | head -c0`: the run ended all the same
        silence(sys.stdout)
    return outcome.exit_code


def json_text(value: object) -> str:
    """Indented for a person at a terminal; compact (and C-fast) for programs."""
    return json.dumps(value, indent=2 if sys.stdout.isatty() else None, allow_nan=False)


def show_status(repo: Path, run: str | None, as_json: bool, show_all: bool) -> None:
    """``gitrun status``: one run in full, or without a run what ``gitrun ls``
    lists (:func:`list_runs`)."""
    out = sys.stdout
    if run is None:
        list_runs(repo, as_json, show_all)
        return

    st = read_status(repo, run, landing=True)

    if as_json:
        out.write(json_text(st.to_json()) + "\n")
    else:
        # A halt's diagnosis, a stray file's name, an attempt's reason: a
        # ledger an older gitrun wrote may hold them raw.
        out.write(visible(format_status(st, limit=None if show_all else 20), lines=True) + "\n")
    out.flush()


def list_runs(repo: Path, as_json: bool, show_all: bool) -> None:
    """``gitrun ls`` (and ``gitrun status`` without a run): a line for every
    run (with ``show_all``, also the leftovers: a branch or local state
    without a run)."""
    out = sys.stdout
    # deferred: status (<= 25x `python -c pass`) imports this module, not start
    from gitrun.commands.leftovers import leftovers, run_pieces, shown_path

    git_dir = Path(where(repo).git_dir)
    pieces = run_pieces(repo, git_dir)
    statuses = [read_status(repo, r, landing=True) for r, p in pieces.items() if p.defined]
    rest = leftovers(repo, git_dir, pieces) if show_all else []
    if as_json:
        data = [st.to_json() for st in statuses] + [left.to_json() for left in rest]
        out.write(json.dumps(data, indent=2, allow_nan=False) + "\n")
        return
    if not statuses and not rest:
        out.write("no runs here; create one with `gitrun new RUN`\n")
    for st in statuses:
        out.write(visible(format_status_line(st)) + "\n")
    for left in rest:
        local_root = shown_path(repo, LocalPaths.under(git_dir, left.pieces.run).root)
        out.write(visible(left.describe(local_root)) + "\n")
    hidden = 0 if show_all else sum(not p.defined for p in pieces.values())
    if hidden:
        out.write(
            f"and {counted(hidden, 'leftover')} of runs without a packet "
            "(`gitrun ls --all` lists them)\n"
        )
