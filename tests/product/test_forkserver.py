"""The suite's gitrun children forked from one server (tests/forkserver.py)
are the children `python -m gitrun` would be: the same output, exit code,
working directory, environment and stdin, a pid of their own, and the
environment read afresh by each (the chaos tests' crash points die by
SIGKILL through it)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.forkserver import SERVER, run_gitrun_call, run_plain


def _plain(args: list[str], cwd: Path, env: dict[str, str], stdin: str) -> tuple[int, str, str]:
    done = run_plain(args, cwd, env, stdin)
    return done.returncode, done.stdout, done.stderr


def test_a_forked_gitrun_is_the_child_python_would_start(git_repo: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITRUN_")}
    payload = json.dumps(
        {"cwd": str(git_repo), "tool_name": "Write", "tool_input": {"file_path": "x"}}
    )
    calls = [
        (["status", "nosuch"], git_repo, env, ""),  # exit 1, a sentence on stderr
        (["check"], tmp_path, env, ""),  # no repository here: where it ran matters
        (["status"], git_repo, {**env, "GITRUN_RUN": "r"}, ""),  # the environment given
        (["hook", "pre-write"], git_repo, {**env, "GITRUN_TASK": "t1"}, payload),  # stdin
        (["no-such-command"], git_repo, env, ""),  # exit 2, click's usage
    ]
    forked_before = SERVER.forked
    for args, cwd, call_env, stdin in calls:
        forked = run_gitrun_call(args, cwd, env=call_env, stdin=stdin)
        assert (forked.returncode, forked.stdout, forked.stderr) == _plain(
            args, cwd, call_env, stdin
        ), args
    assert SERVER.forked == forked_before + len(calls)
