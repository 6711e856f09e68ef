"""Running a hook as a command: ``gitrun hook pre-write|pre-commit|subagent-stop``.

The console entry (:mod:`gitrun.cli.entry`) comes here straight from ``argv``,
without the command line (typer, pydantic and the CLI cost ~200 ms a call,
and Claude Code runs the write hook before every write of every agent); the
typer commands of the same names call :func:`run` too, for ``--help``.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing costs a hook call milliseconds; mypy reads this as True
if TYPE_CHECKING:
    from collections.abc import Callable

    from gitrun.guard.context import HookResult

HOOKS = ("pre-write", "pre-commit", "subagent-stop")
_WHAT = {"pre-write": "write", "pre-commit": "commit", "subagent-stop": "stop"}


def _hook(name: str) -> Callable[[str, dict[str, str]], HookResult]:
    from gitrun.guard import write

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
    from gitrun.guard.write import blocked, claims_task

    environ = dict(os.environ)
    raw = ""
    what = _WHAT[name]
    try:
        if name != "pre-commit":  # git gives a pre-commit hook no input
            raw = sys.stdin.buffer.read().decode("utf-8", errors="replace")
        result = _hook(name)(raw, environ)
    except Exception as exc:
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
    import json

    try:
        return json.loads(raw)
    except Exception:  # malformed, or nested too deep to parse
        return None
