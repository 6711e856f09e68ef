"""``gitrun check``: prove a run is safe to launch, every problem listed
(for a person, the first of each kind and a count of the rest)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gitrun.commands.failure import capped
from gitrun.definition.load import load_run
from gitrun.proof import check
from gitrun.words import counted


def check_data(repo: Path, run_id: str) -> dict[str, Any]:
    """``gitrun check --json`` and the MCP server's ``check``: ready or not,
    the summary and its counts, every problem (a definition that does not
    load: a problem per broken field)."""
    return check.check_json(*check.check_named(repo, run_id))


def show_check(repo: Path, run_id: str, as_json: bool, say: Callable[[str], None]) -> int:
    """``gitrun check``: say what it proved; 0 when the run is ready, else 1.
    A definition that does not load is an error (its sentences), unless
    ``as_json``."""
    if as_json:
        data = check_data(repo, run_id)
        say(json.dumps(data, indent=2, allow_nan=False))
        return 0 if data["ready"] else 1
    report = check.check_run(load_run(repo, run_id))
    if not report.problems:
        say(f"run {run_id!r} is ready: {report.summary}")
        return 0
    say(f"run {run_id!r}: {counted(len(report.problems), 'problem')}:")
    lines = [f"[{problem.code}] {problem.message}" for problem in report.problems]
    for line in capped(lines, [problem.code for problem in report.problems]):
        say(f"  {line}")
    return 1
