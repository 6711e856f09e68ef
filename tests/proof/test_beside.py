"""Runs beside each other in one work tree: a run whose owned paths meet
another's that is driven now, or defined here and not landed, is refused by
`gitrun check` and `gitrun start`; a landed run blocks nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import (
    commit_all,
    git,
    gitrun_process,
    ledger_records,
    run_gitrun,
    wait_until,
    write_run,
)

# Run a's worker writes its output, once the file $GATE exists when one is named.
GATED = """
if [ -n "$GATE" ]; then
    i=0
    while [ ! -e "$GATE" ]; do
        i=$((i + 1)); [ "$i" -gt 1200 ] && exit 9; sleep 0.05
    done
fi
mkdir -p out && echo '{}' > "$GITRUN_OUTPUTS"
"""


def _define_a(repo: Path, gate: Path | None = None) -> None:
    """Run a owns out/*.json (its task writes out/a.json)."""
    command = ["env", f"GATE={gate or ''}", "sh", "-c", GATED]
    write_run(
        repo,
        "a",
        [{"id": "t1", "owns": ["out/*.json"], "outputs": ["out/a.json"]}],
        {"executor": {"command": command, "isolation": "none"}, "limits": {"timeout": "60s"}},
    )
    commit_all(repo, "define a")


def _define_b(repo: Path) -> Path:
    """Run b's task owns out/x.json, which a's glob owns too. Returns the
    file b's worker touches."""
    marker = repo.parent / "B_RAN"
    write_run(
        repo,
        "b",
        [{"id": "u1", "outputs": ["out/x.json"]}],
        {
            "executor": {
                "command": ["sh", "-c", f"touch {marker}; echo '{{}}' > \"$GITRUN_OUTPUTS\""],
                "isolation": "none",
            }
        },
    )
    commit_all(repo, "define b")
    return marker


def _refused(repo: Path, marker: Path, state: str) -> None:
    """`check b` and `start b` both refuse b in one sentence naming both
    runs and the path, and nothing of b starts."""
    checked = run_gitrun(repo, "check", "b")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    sentence = (
        "runs b and a can both write out/x.json (task u1 of b owns 'out/x.json', task t1 of a "
        f"owns 'out/*.json'), and run a {state}; give every path to one run only"
    )
    assert "[run-overlap]" in checked.stdout and sentence in checked.stdout, checked.stdout
    started = run_gitrun(repo, "start", "b")
    assert started.returncode == 1, started.stdout + started.stderr
    assert sentence in started.stderr, started.stderr
    assert git(repo, "branch", "--list", "gitrun/b") == ""
    assert ledger_records(repo, "b") == []
    assert not marker.exists()


def test_a_run_overlapping_one_being_driven_is_refused(git_repo: Path) -> None:
    gate = git_repo.parent / "GO"
    _define_a(git_repo, gate)
    driver = gitrun_process(git_repo, "start", "a", capture=False)
    try:
        wait_until(driver, lambda: (git_repo / ".git/gitrun/a/logs").is_dir())
        marker = _define_b(git_repo)
        _refused(git_repo, marker, "is being driven now")
        gate.touch()
        assert driver.wait(timeout=60) == 0
    finally:
        gate.touch()
        if driver.poll() is None:
            driver.kill()
        driver.wait()


def test_a_run_overlapping_one_defined_and_not_started_is_refused(git_repo: Path) -> None:
    """Of two runs defined and not started, neither starts while the other
    would own a path of its own."""
    _define_a(git_repo)
    marker = _define_b(git_repo)
    _refused(git_repo, marker, "is defined here and has not started")
    started = run_gitrun(git_repo, "start", "a")
    assert started.returncode == 1
    assert "runs a and b can both write out/x.json" in started.stderr, started.stderr
    assert git(git_repo, "branch", "--list", "gitrun/a") == ""


@pytest.mark.parametrize("branch", ["kept", "deleted"])
def test_a_landed_run_blocks_no_run_that_redoes_its_paths(git_repo: Path, branch: str) -> None:
    """Until a lands, b may not own a path of a's; once a's outputs are
    merged (its branch kept or deleted since), b redoes them."""
    _define_a(git_repo)
    done = run_gitrun(git_repo, "start", "a")
    assert done.returncode == 0, done.stdout + done.stderr
    marker = _define_b(git_repo)
    _refused(git_repo, marker, "has started and has not landed")
    # b, defined since, does not stop a, which started first.
    for args in (("check", "a"), ("resume", "a")):
        again = run_gitrun(git_repo, *args)
        assert again.returncode == 0, again.stdout + again.stderr
    landed = run_gitrun(git_repo, "land", "a")
    assert landed.returncode == 0, landed.stdout + landed.stderr
    if branch == "deleted":
        git(git_repo, "branch", "-D", "gitrun/a")
    checked = run_gitrun(git_repo, "check", "b")
    assert checked.returncode == 0, checked.stdout
    started = run_gitrun(git_repo, "start", "b")
    assert started.returncode == 0, started.stdout + started.stderr
    assert marker.exists()
    assert git(git_repo, "show", "gitrun/b:out/x.json") == "{}\n"
    assert os.path.isfile(git_repo / "out/x.json")
