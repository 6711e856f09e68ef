"""Commands answered without the command line's parser (issue 14).

typer builds a pydantic TypeAdapter for every parameter of the command it
runs (~100 ms before the command starts), so :mod:`gitrun.entry` sends the
plain forms of the commands people run most often here, parsed by hand:

    gitrun [-C DIR] status [RUN] [--json] [--all]
    gitrun [-C DIR] start|resume RUN [--json] [-q|--quiet]
    gitrun [-C DIR] next RUN [--max N] [--json]       (an external run)
    gitrun [-C DIR] collect RUN [--throttled TASK]... [--json]
    gitrun --help (and -h), on a terminal 80 columns wide or wider

The top-level help is the text typer renders at its widest (80 columns),
kept in :mod:`gitrun.helptext`, which a test renders again and compares.
Anything else (``--help``, an unknown or misspelled option, a second
argument) goes to the full command line, which explains it. The typer
command of the same name calls the same function, so both ways print the
same.
"""

from __future__ import annotations

import json
import os
import re
import sys

TYPE_CHECKING = False  # typing costs milliseconds; mypy reads this as True
if TYPE_CHECKING:
    from pathlib import Path


def main(argv: list[str]) -> int | None:
    """The exit code of a command answered here; None for the full command line."""
    if argv in (["--help"], ["-h"]) and _columns() >= HELP_COLUMNS:
        from gitrun.helptext import MAIN

        sys.stdout.write(MAIN)
        return 0
    directory = None
    if len(argv) >= 2 and argv[0] == "-C":
        directory, argv = argv[1], argv[2:]
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    if command == "status":
        form = _form(args, {"--json", "--all"})
        if form is None:
            return None
        run, flags, _ = form
        try:
            status(directory, run, "--json" in flags, "--all" in flags)
        except BrokenPipeError:  # `gitrun status | head`
            silence(sys.stdout)
            return 1
        return 0  # a failure is the caller's to report, as the command line reports it
    if command in ("start", "resume"):
        form = _form(args, {"--json", "--quiet"})
        if form is None or (run := form[0]) is None:
            return None
        _, flags, _ = form
        return drive(
            repo_at(directory), run, "--json" in flags, "--quiet" in flags, command == "resume"
        )
    if command in ("next", "collect"):
        return _external_form(directory, command, args)
    return None


def _external_form(directory: str | None, command: str, args: list[str]) -> int | None:
    """``next RUN [--max N] [--json]`` and ``collect RUN [--throttled TASK]... [--json]``:
    an orchestrating session calls them for every batch."""
    from gitrun import externalcmd

    if command == "next":
        form = _form(args, {"--json"}, {"--max"})
        if form is None or (run := form[0]) is None:
            return None
        _, flags, values = form
        given = values.get("--max", [])
        if not all(_DIGITS.fullmatch(value) for value in given):
            return None  # the command line explains what --max takes
        most = int(given[-1]) if given else None  # the last one counts, as click's does
        return externalcmd.next_batch(repo_at(directory), run, most, "--json" in flags)
    form = _form(args, {"--json"}, {"--throttled"})
    if form is None or (run := form[0]) is None:
        return None
    _, flags, values = form
    throttled = values.get("--throttled", [])
    return externalcmd.collect(repo_at(directory), run, throttled, "--json" in flags)


# Short options the quick forms know, by the long name they stand for.
_SHORT = {"-q": "--quiet"}
_DIGITS = re.compile(r"[0-9]+")


def _form(
    args: list[str], flags: set[str], options: frozenset[str] | set[str] = frozenset()
) -> tuple[str | None, set[str], dict[str, list[str]]] | None:
    """The run, the flags and each option's values of a plain command line:
    at most one argument (the run), known flags, and known options each with
    a value (``--max 4`` or ``--max=4``) that is not itself an option. None
    for anything else: the full command line explains it."""
    run: str | None = None
    given: set[str] = set()
    values: dict[str, list[str]] = {}
    rest = iter(args)
    for arg in rest:
        name, eq, value = arg.partition("=")
        name = _SHORT.get(name, name) if not eq else name
        if name in options:
            if not eq:
                value = next(rest, "")
            if not value or value.startswith("-"):
                return None
            values.setdefault(name, []).append(value)
        elif not eq and name in flags:
            given.add(name)
        elif run is None and arg and not arg.startswith("-"):
            run = arg
        else:
            return None
    return run, given, values


def event(line: str) -> None:
    """One plain line per driver event, on stderr (stdout stays for results).
    A reader that went away (`gitrun start r 2>&1 | head -1`) loses the
    lines, never the run: a write failing here would stop the driver
    between launching attempts and recording them."""
    try:
        sys.stderr.write(f"gitrun: {line}\n")
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


def drive(repo: Path, run: str, as_json: bool, quiet: bool, resume: bool) -> int:
    """``gitrun start`` or ``resume``: its exit code. A command-mode run is
    driven to its end; an external run prints its first batch."""
    from functools import partial

    from gitrun.runs import RunDef
    from gitrun.session import bring_definition, resume_run, start_run
    from gitrun.state import load_view, where

    if resume:
        bring_definition(repo, run, event)
    shape = load_view(where(repo), run, keep=True)
    if shape.executor_kind == "external":
        from gitrun.externalcmd import drive_external

        return drive_external(repo, run, as_json, resume, event)
    # A view that missed loaded the whole definition: start need not load it
    # again (resume loads it under the lock, after restoring it).
    loaded = shape if isinstance(shape, RunDef) else None
    drive_run = resume_run if resume else partial(start_run, loaded=loaded)
    if quiet or as_json:
        outcome = drive_run(repo, run, lambda _line: None)
    elif sys.stderr.isatty() and sys.stdout.isatty():
        from gitrun.view import LiveView

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
        data["violations"] = [v.to_record() for v in outcome.violations]
        data["load_held_seconds"] = round(outcome.load_held, 1)
        text = json.dumps(data, indent=2)
    else:
        from gitrun.report import format_summary

        text = format_summary(
            outcome.status, outcome.stopped_by, outcome.halt, outcome.violations, outcome.load_held
        )
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # `gitrun start r | head -c0`: the run ended all the same
        silence(sys.stdout)
    return outcome.exit_code


HELP_COLUMNS = 80  # click renders help at most this wide (min(columns, 80) - 2)


def _columns() -> int:
    """The terminal's width as click reads it (shutil.get_terminal_size)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 80  # shutil's fallback
    return columns


def json_text(value: object) -> str:
    """Indented for a person at a terminal; compact (and C-fast) for programs."""
    return json.dumps(value, indent=2 if sys.stdout.isatty() else None)


def repo_at(directory: str | Path | None) -> Path:
    """The top of the work tree holding ``directory`` (default: here); the
    walk of :func:`gitrun.hookrules.find_repo`, and git's own error outside."""
    from pathlib import Path

    from gitrun.hookrules import find_repo

    found = find_repo(str(directory) if directory else None)
    if found is not None:
        return Path(found.root)
    from gitrun.git import find_repo_root

    return find_repo_root(Path(directory) if directory else None)


def status(directory: str | Path | None, run: str | None, as_json: bool, show_all: bool) -> None:
    """``gitrun status``: one run in full, or a line for every run."""
    repo = repo_at(directory)
    out = sys.stdout
    if run is not None:
        from gitrun.viewload import begin

        begun = begin(repo, run)  # before the imports below, which a check beside does not need
        try:
            from gitrun.state import read_status

            st = read_status(repo, run, begun=begun)
        finally:
            if begun is not None and begun[1] is not None:
                begun[1].close()  # reaped already, unless the imports were interrupted
        from gitrun.report import format_status

        if as_json:
            out.write(json_text(st.to_json()) + "\n")
        else:
            out.write(format_status(st, limit=None if show_all else 20) + "\n")
        out.flush()
        return
    from gitrun.report import format_status_line
    from gitrun.runview import run_ids
    from gitrun.state import read_status

    statuses = [read_status(repo, r) for r in run_ids(str(repo))]
    if as_json:
        out.write(json.dumps([st.to_json() for st in statuses], indent=2) + "\n")
    elif not statuses:
        out.write("no runs here; create one with `gitrun new RUN`\n")
    for st in statuses if not as_json else []:
        out.write(format_status_line(st) + "\n")
