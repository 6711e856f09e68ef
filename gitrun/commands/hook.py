"""``gitrun hook NAME``: one of the hooks gitrun installs, run on the agent's
JSON on stdin.

The write hook's hot path comes here straight from ``argv``
(:mod:`gitrun.cli.entry`), so this imports the hook and nothing else.
"""

from __future__ import annotations

from gitrun.guard.main import run


def run_hook(name: str) -> int:
    """Run the hook ``name`` (pre-write, pre-commit, subagent-stop); its exit code."""
    return run(name)
