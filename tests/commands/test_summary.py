"""A start's summary is the status ``gitrun status`` reads next.

At the end of a run the driver builds its summary from its own engine,
without loading it again from the branch, when that is provably the same
answer; otherwise it reads the run again. Either way ``gitrun start --json``
must say what a following ``gitrun status --json`` says: each case runs
gitrun as a real child process and compares the two, and the in-process
cases show which way the summary was made (a spy on the re-read, which
still runs).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gitrun.commands.session import start_run
from gitrun.engine import progress
from gitrun.engine.status import read_status
from tests.helpers import build_tree, commit_all, fake_worker_run, run_gitrun, write_run

# What `start --json` says besides the status.
START_ONLY = ("exit_code", "stopped_by", "load_held_seconds")


def quiet(_line: str) -> None:
    pass


def _started_and_status(repo: Path, run: str = "r") -> tuple[dict[str, Any], dict[str, Any]]:
    started = run_gitrun(repo, "start", run, "--json")
    assert started.returncode in (0, 1, 3), started.stderr
    shown = json.loads(started.stdout)
    for key in START_ONLY:
        shown.pop(key)
    status = run_gitrun(repo, "status", run, "--json")
    assert status.returncode == 0, status.stderr
    return shown, json.loads(status.stdout)


def _rewrites_the_fork_point(repo: Path) -> None:
    """t1 rewrites a file the fork point holds: attempt 1 breaks it
    (quarantined), attempt 2 puts back exactly what the fork point holds.
    Valid, and done: the branch holds what the valid attempt made, though
    that is no new content since the fork point."""
    build_tree(repo, {"out/t1.json": '{"kept": 1}\n', "out/t2.json": '{"kept": 2}\n'})
    commit_all(repo, "the files the tasks edit")
    script = (
        'if [ "$GITRUN_TASK" = t1 ]; then '
        'if [ "$GITRUN_ATTEMPT" = 1 ]; then printf "{broken" > "$GITRUN_OUTPUTS"; '
        'else printf \'{"kept": 1}\\n\' > "$GITRUN_OUTPUTS"; fi; '
        'else printf \'{"new": 2}\\n\' > "$GITRUN_OUTPUTS"; fi'
    )
    tasks: list[dict[str, object]] = [
        {"id": "t1", "outputs": ["out/t1.json"]},
        {"id": "t2", "outputs": ["out/t2.json"]},
    ]
    packet = {"executor": {"preset": "shell", "shell": script}, "limits": {"canary": 0}}
    write_run(repo, "r", tasks, packet)


CASES = {
    "done": lambda repo: fake_worker_run(repo, "r", 3, {"default": "write"}),
    "failed": lambda repo: fake_worker_run(
        repo, "r", 3, {"tasks": {"t02": "invalid"}}, {"limits": {"max_attempts": 2}}
    ),
    "quarantined and retried": lambda repo: fake_worker_run(
        repo, "r", 3, {"tasks": {"t02": "invalid_then_write"}}
    ),
    "halted": lambda repo: fake_worker_run(
        repo, "r", 3, {"default": "nowrite"}, {"limits": {"max_attempts": 1}}
    ),
    "valid, with the fork point's content": _rewrites_the_fork_point,
}


@pytest.mark.parametrize("case", list(CASES))
def test_start_says_what_status_reads_next(git_repo: Path, case: str) -> None:
    CASES[case](git_repo)
    shown, status = _started_and_status(git_repo)
    assert shown == status
    statuses = {task["status"] for task in status["tasks"].values()}
    expected = {
        "done": {"done"},
        "failed": {"done", "failed"},
        "quarantined and retried": {"done"},
        "halted": {"failed", "pending"},
        "valid, with the fork point's content": {"done"},
    }[case]
    assert statuses == expected
    if case == "halted":
        assert status["halt"] is not None and status["halt"]["kind"] == "canary"
    if case == "quarantined and retried":
        assert status["tasks"]["t02"]["attempts"] == 1
        assert status["tasks"]["t02"]["last_attempt"] == 2
        assert len(status["tasks"]["t02"]["records"]) == 2


def count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The run ids the driver reads the status of again, from now on."""
    reads: list[str] = []

    def spy(repo: Path, run_id: str, run: Any = None) -> Any:
        reads.append(run_id)
        return read_status(repo, run_id, run)

    monkeypatch.setattr(progress, "read_status", spy)
    return reads


@pytest.mark.parametrize(
    ("case", "read_again"),
    [
        ("done", False),
        ("failed", False),
        ("quarantined and retried", False),
        ("halted", False),
        ("valid, with the fork point's content", False),
    ],
)
def test_the_summary_is_read_again_only_when_the_engine_may_differ(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch, case: str, read_again: bool
) -> None:
    """The driver's engine answers, except where its done tasks are not the
    branch's; the answer is the status read afterwards either way."""
    CASES[case](git_repo)
    reads = count_reads(monkeypatch)
    outcome = start_run(git_repo, "r", quiet)
    assert bool(reads) is read_again
    assert outcome.status.driver is None
    assert outcome.status.to_json() == read_status(git_repo, "r").to_json()


def test_a_violation_and_a_halt_recorded_while_driving_are_in_the_summary(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records the driver writes besides attempts (a strict ownership
    violation, and the halt it causes) reach its engine's summary as they
    reach the ledger."""
    fake_worker_run(
        git_repo,
        "r",
        2,
        {"default": "stray"},
        {"ownership": {"strict": True}, "limits": {"canary": 0}},
        isolation="none",  # a confined worker's stray write fails: no violation to halt for
    )
    reads = count_reads(monkeypatch)
    outcome = start_run(git_repo, "r", quiet)
    status = read_status(git_repo, "r")
    assert status.violations and status.halt is not None
    assert not reads
    assert outcome.status.to_json() == status.to_json()


def test_one_attempt_is_said_in_the_singular(git_repo: Path) -> None:
    """A task that failed for good after one attempt reads "1 attempt", in the
    driver's event line, the summary and the status, never "1 attempts"."""
    fake_worker_run(
        git_repo,
        "r",
        2,
        {"tasks": {"t02": "invalid"}},
        {"limits": {"max_attempts": 1, "canary": 0}},
    )
    started = run_gitrun(git_repo, "start", "r")
    assert started.returncode == 1, started.stdout + started.stderr
    said = started.stdout + started.stderr + run_gitrun(git_repo, "status", "r").stdout
    assert "failed for good after 1 attempt" in started.stderr, started.stderr
    assert "failed for good: t02 (1 attempt: " in started.stdout, started.stdout
    assert not re.search(r"\b1 attempts\b", said), said
