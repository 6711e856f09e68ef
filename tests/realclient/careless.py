"""A careless worker through a real agent CLI, confined by bubblewrap.

Two tasks, run one after the other. Every attempt writes its own output;
the first also writes its neighbour's output (before the neighbour ran), a
protected file and the repository's git config, each through the client's
own tool. Confined, none of those three changes, and the neighbour's task is
done by its own attempt with its own content.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gitrun.workers.sandbox import probe
from tests.helpers import build_tree, commit_all, git, ledger_records, write_run

SECRET = "SECRET.txt"
# One shell line: the task's own output; for t1 also t2's, the protected
# file and the git config, each said when the file system refuses it.
CARELESS = (
    'mkdir -p out && printf \'{"task": "%s"}\' "$GITRUN_TASK" > "out/$GITRUN_TASK.json" && '
    'if [ "$GITRUN_TASK" = t1 ]; then '
    "printf '{\"clobbered\": true}' > out/t2.json || echo 't2: refused'; "
    f"echo leaked >> {SECRET} || echo 'secret: refused'; "
    "echo '[alias] x = !touch pwned' >> .git/config || echo 'config: refused'; fi"
)


def needs_bubblewrap() -> None:
    refusal = probe()
    if refusal is not None:
        pytest.skip(refusal)


def careless_run(repo: Path, preset: str, model: str, **executor: Any) -> bytes:
    """Write and commit the two-task run confined under ``preset``; the git
    config as it was, for :func:`assert_nothing_of_anyone_else_changed`."""
    build_tree(repo, {SECRET: "mine\n"})
    write_run(
        repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}, {"id": "t2", "outputs": ["out/t2.json"]}],
        {
            "model": {"default": model},
            "executor": {"kind": "command", "preset": preset, "isolation": "sandbox", **executor},
            "limits": {"canary": 0, "concurrency": 1, "max_attempts": 2, "timeout": "90s"},
            "ownership": {"protected": [SECRET]},
        },
    )
    commit_all(repo, "run r")
    return (repo / ".git" / "config").read_bytes()


def assert_nothing_of_anyone_else_changed(repo: Path, config: bytes, said: str) -> None:
    """The neighbour's output, the protected file and the git config are as
    they were; each task is done by its own first attempt; the stray is named."""
    for task in ("t1", "t2"):
        committed = git(repo, "show", f"gitrun/r:out/{task}.json")
        assert json.loads(committed) == {"task": task}, said
    assert (repo / SECRET).read_text() == "mine\n"
    assert (repo / ".git" / "config").read_bytes() == config
    assert not (repo / "pwned").exists()
    records = ledger_records(repo)
    outcomes = [(r["task"], r["attempt"], r["outcome"]) for r in records if "outcome" in r]
    assert sorted(outcomes) == [("t1", 1, "valid"), ("t2", 1, "valid")], said
    violations = [r for r in records if r.get("event") == "violation"]
    assert violations == [], violations
