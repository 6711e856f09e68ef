"""What ``gitrun next``, ``collect``, and ``start``/``resume`` of an external
run print, and their exit codes.

An orchestrating session calls ``next`` and ``collect`` for every batch;
the typer commands (:mod:`gitrun.cli.external`) call these functions.
Results go to stdout; a batch's ownership
violations and the spend budget's notices go to stderr (a collection prints
them with its result, on stdout).
"""

from __future__ import annotations

import json
import sys

from gitrun.errors import EXIT_DONE, EXIT_FAILED, EXIT_HALTED, GitrunError, UsageError
from gitrun.guard.install import plugin_dir
from gitrun.store import git
from gitrun.visible import visible

TYPE_CHECKING = False  # typing costs milliseconds; mypy reads this as True
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from gitrun.engine.external import Batch, Collected


def lead_guide() -> str:
    """How to lead an external run: the body of the plugin's lead skill, the
    one text a lead reads, from Claude Code or from any other session."""
    try:
        text = (plugin_dir() / "skills" / "lead" / "SKILL.md").read_text(encoding="utf-8")
    except OSError:  # pragma: no cover - a broken installation
        return ""
    return text.split("---\n", 2)[-1].strip()


def drive_external(
    repo: Path,
    run: str,
    as_json: bool,
    resume: bool,
    event: Callable[[str], None],
    rerun_all: bool = False,
    take_edits: bool = False,
    full: bool = False,
) -> int:
    """start/resume of an external run: the branch (start), a collect (resume),
    a batch; ``event`` says what the start or resume did."""
    collected, batch = begin(repo, run, resume, event, rerun_all, take_edits)
    if collected is not None and not as_json:
        print_collected(collected)
    return print_batch(run, batch, as_json, full)


def begin(
    repo: Path,
    run: str,
    resume: bool,
    event: Callable[[str], None],
    rerun_all: bool = False,
    take_edits: bool = False,
) -> tuple[Collected | None, Batch]:
    """Start or resume an external run (``gitrun start``/``resume``, and the
    MCP server's): what a resume collected (leases of a lead that is gone
    come back abandoned, using no attempt), and the first batch."""
    # deferred: --help imports this module (lead_guide), not the engine and pydantic
    from gitrun.commands.session import prepare_external
    from gitrun.engine.external import external_run

    prepare_external(repo, run, event, resume, rerun_all, take_edits)
    with external_run(repo, run, afresh=True) as ext:
        collected = ext.collect([], abandon=True) if resume else None
        return collected, ext.next_batch(None)


def begin_external(
    repo: Path, run: str, resume: bool, event: Callable[[str], None]
) -> tuple[Collected | None, Batch]:
    """:func:`begin`, for a caller that knows only the run's name (the MCP
    server's ``start`` and ``resume``): the run opened as ``gitrun start``
    opens it, and refused unless its executor is external."""
    # deferred: --help imports this module (lead_guide), not the engine and pydantic
    from gitrun.commands.session import open_run

    if open_run(repo, run, resume, event).executor_kind != "external":
        raise GitrunError(
            f"run {run!r} is not external (its [executor] kind runs the workers itself): "
            f"drive it with `gitrun {'resume' if resume else 'start'} {run}`"
        )
    return begin(repo, run, resume, event)


def lease(repo: Path, run: str, max_tasks: int | None) -> Batch:
    """Lease the next batch (``gitrun next``, and the MCP server's ``next``)."""
    # deferred: --help imports this module (lead_guide), not the engine and pydantic
    from gitrun.engine.external import external_run

    if max_tasks is not None and max_tasks < 1:
        raise UsageError("--max must be 1 or more")
    with external_run(repo, run) as ext:
        return ext.next_batch(max_tasks)


def collect_leases(repo: Path, run: str, throttled: list[str]) -> Collected:
    """Judge every leased task from the disk (``gitrun collect``, and the MCP
    server's ``collect``)."""
    # deferred: --help imports this module (lead_guide), not the engine and pydantic
    from gitrun.engine.external import external_run

    git.prepare_writes()  # it commits what validated: the import overlaps the reads before
    with external_run(repo, run) as ext:
        return ext.collect(throttled)


def next_batch(
    repo: Path, run: str, max_tasks: int | None, as_json: bool, full: bool = False
) -> int:
    """``gitrun next``: lease a batch and print its pointers."""
    return print_batch(run, lease(repo, run, max_tasks), as_json, full)


def collect(repo: Path, run: str, throttled: list[str], as_json: bool, full: bool = False) -> int:
    """``gitrun collect``: judge every leased task from the disk."""
    collected = collect_leases(repo, run, throttled)
    if as_json:
        data = collected.to_json()
        _out(json.dumps(data, indent=2, allow_nan=False) if full else _compact(data))
    else:
        print_collected(collected)
    return EXIT_HALTED if collected.halted else EXIT_DONE


def _compact(data: dict[str, object]) -> str:
    """JSON for a lead's context: one line, no spaces, and no field that says
    nothing (empty, false or null: each byte is read by a model)."""
    said = {k: v for k, v in data.items() if v not in (None, False, "", [], {})}
    return json.dumps(said, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def print_batch(run: str, batch: Batch, as_json: bool, full: bool = False) -> int:
    """Print a batch; its exit code: 0 with tasks leased, every task done, or
    a healthy run waiting (``why`` says for what), 3 halted, 1 when nothing is
    left to hand out but some task failed for good."""
    healthy = batch.leased or batch.done or batch.why is not None
    code = EXIT_HALTED if batch.halted else EXIT_DONE if healthy else EXIT_FAILED
    for violation in batch.violations:
        _err(f"ownership violation: {violation}")
    for notice in batch.notices:  # the spend budget's
        _err(notice)
    if as_json:
        data = batch.to_json(full)
        _out(json.dumps(data, indent=2, allow_nan=False) if full else _compact(data))
        return code
    for item in batch.leased:
        _out(item["pointer"] + "\n")
    if batch.leased:
        _out(
            f"leased {len(batch.leased)}: dispatch each pointer above as one subagent, wait for "
            f"them, then `gitrun collect {run}`"
        )
    if batch.reason:
        _out(batch.reason)
    return code


def print_collected(collected: Collected) -> None:
    for label in ("done", "missing", "invalid", "throttled", "abandoned", "failed"):
        items = getattr(collected, label)
        if not items:
            continue
        shown = [
            f"{t} ({collected.reasons[t]})" if t in collected.reasons and label != "done" else t
            for t in items
        ]
        _out(f"{label}: {', '.join(shown)}")
    for task_id, lines in collected.said.items():
        _out(f"{task_id} said: " + " / ".join(lines))
    for violation in collected.violations:
        _out(f"ownership violation: {violation}")
    for notice in collected.notices:  # the spend budget's
        _out(notice)
    _out(f"next: {collected.next_step}")


def _out(line: str) -> None:
    sys.stdout.write(visible(line, lines=True) + "\n")  # a reason may quote a worker
    sys.stdout.flush()


def _err(line: str) -> None:
    sys.stderr.write(visible(line, lines=True) + "\n")
    sys.stderr.flush()
