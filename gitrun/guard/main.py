"""Running a hook as a command: ``gitrun hook pre-write|pre-commit|subagent-stop``.

The console entry (:mod:`gitrun.cli.entry`) comes here straight from ``argv``,
without the command line (typer, pydantic and the CLI cost ~200 ms a call,
and Claude Code runs the write hook before every write of every agent); the
typer commands of the same names call :func:`run` too, for ``--help``.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from gitrun.guard import write
from gitrun.guard.write import blocked, claims_task

TYPE_CHECKING = False  # typing costs a hook call milliseconds; mypy reads this as True
if TYPE_CHECKING:
    from collections.abc import Callable

    from gitrun.guard.context import HookResult

HOOKS = ("pre-write", "pre-commit", "subagent-stop")
# Seconds a hook call may take before it denies: well below the clients'
# own hook timeouts (Claude Code's is 60 s), which let the call through when
# they kill a hook. GITRUN_HOOK_BUDGET sets another.
BUDGET = 10.0


class OutOfTime(BaseException):
    """The hook's time budget ran out (a file that never answers, a stuck git);
    no ``except Exception`` on the way swallows it."""


def _out_of_time(_signum: int, _frame: object) -> None:
    raise OutOfTime


def _budget(environ: dict[str, str]) -> float:
    try:
        seconds = float(environ.get("GITRUN_HOOK_BUDGET", BUDGET))
    except ValueError:
        return BUDGET
    return seconds if 0 < seconds < 3600 else BUDGET


_WHAT = {"pre-write": "write", "pre-commit": "commit", "subagent-stop": "stop"}


def _hook(name: str) -> Callable[[str, dict[str, str]], HookResult]:
    if name == "pre-write":
        return write.pre_write
    if name == "subagent-stop":
        return write.subagent_stop
    return lambda _raw, environ: write.pre_commit(environ)


def run(name: str) -> int:
    """Run hook ``name`` on this process's stdin and environment; the exit code.

    In a gitrun task's context any failure at all blocks: Claude Code blocks
    a tool call only on exit 2 (any other failure lets it through), so an
    unexpected error here, even in reading the input, exits 2 with one line
    on stderr (fail closed). Outside every task's context an
    unexpected error stays a crash, for the command line to report.
    """
    environ = dict(os.environ)
    raw = ""
    what = _WHAT[name]
    budget = _budget(environ)
    signal.signal(signal.SIGALRM, _out_of_time)
    signal.setitimer(signal.ITIMER_REAL, budget)
    try:
        if name != "pre-commit":  # git gives a pre-commit hook no input
            raw = sys.stdin.buffer.read().decode("utf-8", errors="replace")
        result = _hook(name)(raw, environ)
        signal.setitimer(signal.ITIMER_REAL, 0)
    except OutOfTime:
        # Whoever's call it was, a hook that cannot decide in time blocks.
        sys.stderr.write(
            f"gitrun: blocked: the {what} hook could not decide within its {budget:g} s budget "
            "(a state file that never answers, or a stuck git); run `gitrun status` to see why\n"
        )
        return 2
    except Exception as exc:
        signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            ours = claims_task(_parsed(raw), environ, raw)
        except Exception:  # pragma: no cover - claims_task reads only dicts and strings
            ours = True
        if not ours:
            raise
        sys.stderr.write(blocked(what, exc) + "\n")
        return 2
    if result.stdout:
        sys.stdout.write(result.stdout + "\n")
    if result.stderr:
        sys.stderr.write(result.stderr if result.stderr.endswith("\n") else result.stderr + "\n")
    return result.code


def _parsed(raw: str) -> object:
    try:
        return json.loads(raw)
    except Exception:  # malformed, or nested too deep to parse
        return None
