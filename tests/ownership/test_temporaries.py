"""A client's atomic-write temporary of an owned path is part of that path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitrun.definition.load import load_run
from gitrun.engine.audit import Audit
from gitrun.guard.write import pre_write
from gitrun.ownership.temporaries import target_of_temporary
from tests.helpers import build_tree, commit_all, write_run

TASKS = [
    {"id": "t1", "outputs": ["out/b.json"]},
    {"id": "t2", "outputs": ["out/c.json"], "owns": ["out/c.json", "notes/*.md"]},
]


@pytest.mark.parametrize(
    ("path", "target"),
    [
        ("out/b.json.tmp.4242.0f3a9c1b2d4e", "out/b.json"),  # as Claude Code names it
        ("b.json.tmp.1.a", "b.json"),
        ("out/b.json.evil", None),
        ("out/b.json.tmp", None),
        ("out/b.json.tmp.4242", None),
        ("out/b.json.tmp.pid.0f3a", None),
        ("out/b.json.tmp.4242.0F3A", None),  # upper-case hex: not the client's
        ("out/b.json.tmp.4242.0f3a.x", None),
        ("out/.tmp.4242.0f3a", None),  # names no file it would be renamed to
        (".tmp.1.a", None),
    ],
)
def test_the_temporary_pattern_is_tight(path: str, target: str | None) -> None:
    assert target_of_temporary(path) == target


def test_the_audit_does_not_report_a_temporary_of_an_owned_path_but_reports_a_stray(
    git_repo: Path,
) -> None:
    repo = git_repo
    write_run(repo, "r", TASKS)
    commit_all(repo, "run r")
    audit = Audit(load_run(repo, "r"))
    audit.running("t1")
    build_tree(
        repo,
        {
            "out/b.json.tmp.4242.0f3a9c1b2d4e": "{",  # caught between write and rename
            "notes/x.md.tmp.7.ab12": "draft",  # of a glob-owned path
            "out/b.json.evil": "x",
            "out/d.json.tmp.4242.0f3a9c1b2d4e": "{",  # of a path nobody owns
        },
    )
    found = sorted(v.path for v in audit.check(["t1"]))
    assert found == ["out/b.json.evil", "out/d.json.tmp.4242.0f3a9c1b2d4e"]


def test_the_write_hook_judges_a_temporary_as_its_target(git_repo: Path) -> None:
    repo = git_repo
    write_run(repo, "r", TASKS)

    def decision(path: str) -> str:
        call = {
            "cwd": str(repo),
            "hook_event_name": "PreToolUse",
            "tool_name": "Write",
            "tool_input": {"file_path": str(repo / path), "content": "{}"},
        }
        result = pre_write(json.dumps(call), {"GITRUN_RUN": "r", "GITRUN_TASK": "t1"})
        assert result.code == 0
        return "deny" if "deny" in result.stdout else "allow"

    assert decision("out/b.json.tmp.4242.0f3a9c1b2d4e") == "allow"
    assert decision("out/b.json.evil") == "deny"
    assert decision("out/c.json.tmp.4242.0f3a9c1b2d4e") == "deny"  # t2's path
