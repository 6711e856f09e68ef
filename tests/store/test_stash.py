"""The ledger's truth is what the driver appended, not what the work tree holds.

The ledger's chunks are untracked files in the user's work tree, so a user's
``git stash -u`` takes them away mid-run, ``git stash pop`` brings back the
copy the stash made, and ``git clean -fdx`` removes them. Records the driver
wrote must reach the branch whatever happened to that copy, and ``status``
must read the branch's records, never a truncated copy as the whole ledger.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.helpers import (
    build_tree,
    commit_all,
    committed_ledger,
    git,
    gitrun_process,
    ledger_records,
    run_gitrun,
    wait_until,
    write_run,
)

TASKS = [f"t{i:02d}" for i in range(1, 13)]


def _gated_run(repo: Path, gates: Path) -> None:
    """Run "r": each task's worker waits for its gate file (outside the
    repository, which a stash does not touch), then writes its output."""
    gates.mkdir()
    script = (
        f'while [ ! -e "{gates}/$GITRUN_TASK" ]; do sleep 0.02; done; mkdir -p out; '
        'printf \'{"task": "%s"}\\n\' "$GITRUN_TASK" > "$GITRUN_OUTPUTS"'
    )
    write_run(
        repo,
        "r",
        [{"id": t, "outputs": [f"out/{t}.json"]} for t in TASKS],
        {
            # Unconfined: a confined attempt whose output directory the stash
            # takes away is interrupted and runs again (tests/workers/test_sandbox.py).
            "executor": {"command": ["sh", "-c", script], "isolation": "none"},
            "limits": {"concurrency": 4, "timeout": "120s"},
        },
    )
    build_tree(repo, {"notes.txt": "mine\n"})
    commit_all(repo, "define r")


def _committed_outputs(repo: Path) -> set[str]:
    out = subprocess.run(
        ["git", "-C", str(repo), "ls-tree", "-r", "--name-only", "gitrun/r", "--", "out"],
        capture_output=True,
        text=True,
    ).stdout
    return {Path(p).stem for p in out.split()}


def _open(gates: Path, tasks: list[str]) -> None:
    for task in tasks:
        (gates / task).touch()


def _drive_with(
    repo: Path, gates: Path, middle: Callable[[], None], after: Callable[[], None]
) -> None:
    """Drive the run: four tasks land, then ``middle``; four more land, then
    ``after``; the last four land and the driver ends."""
    driver = gitrun_process(repo, "start", "r", capture=False)
    try:
        _open(gates, TASKS[:4])
        wait_until(
            driver, lambda: _committed_outputs(repo) >= set(TASKS[:4]), 60, what="t01-t04 landed"
        )
        middle()
        _open(gates, TASKS[4:8])
        wait_until(
            driver, lambda: _committed_outputs(repo) >= set(TASKS[:8]), 60, what="t01-t08 landed"
        )
        after()
        _open(gates, TASKS[8:])
        assert driver.wait(timeout=120) == 0
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


def _assert_ledger_whole(repo: Path) -> None:
    assert _committed_outputs(repo) == set(TASKS)
    valid = {
        r["task"]
        for r in committed_ledger(repo)
        if r.get("outcome") == "valid" and "event" not in r
    }
    assert valid == set(TASKS), f"tasks without a committed record: {set(TASKS) - valid}"
    proc = run_gitrun(repo, "status", "r", "--json")
    assert proc.returncode == 0, proc.stderr
    status = json.loads(proc.stdout)
    assert status["counts"]["done"] == len(TASKS)
    assert status["spawns"] == len(TASKS)
    missing = [t for t, s in status["tasks"].items() if not s["records"]]
    assert not missing, f"status shows no record for {missing}"
    proc = run_gitrun(repo, "log", "r", "--attempts", "--json")
    assert sorted(r["task"] for r in json.loads(proc.stdout)) == TASKS


def test_stash_and_pop_during_a_run_lose_no_ledger_record(git_repo: Path, tmp_path: Path) -> None:
    gates = tmp_path / "gates"
    _gated_run(git_repo, gates)

    def stash() -> None:
        (git_repo / "notes.txt").write_text("mine, changed\n")
        git(git_repo, "stash", "push", "-u", "-q")
        assert not (git_repo / ".gitrun/runs/r/ledger").exists()

    def pop() -> None:
        git(git_repo, "stash", "pop", "-q")
        assert (git_repo / "notes.txt").read_text() == "mine, changed\n"

    _drive_with(git_repo, gates, stash, pop)
    _assert_ledger_whole(git_repo)
    # The older copies the pop put back became what the driver wrote, so a
    # program reading the files finds every record too.
    on_disk = [r for r in ledger_records(git_repo) if r.get("outcome") == "valid"]
    assert sorted(str(r["task"]) for r in on_disk) == TASKS


def test_git_clean_of_the_ledger_during_a_run_loses_no_record(
    git_repo: Path, tmp_path: Path
) -> None:
    gates = tmp_path / "gates"
    _gated_run(git_repo, gates)

    def clean() -> None:
        git(git_repo, "clean", "-fdxq", ".gitrun/runs/r/ledger")
        assert not (git_repo / ".gitrun/runs/r/ledger").exists()

    _drive_with(git_repo, gates, clean, clean)
    _assert_ledger_whole(git_repo)


def test_an_output_ignored_mid_run_is_not_committed(git_repo: Path, tmp_path: Path) -> None:
    gates = tmp_path / "gates"
    _gated_run(git_repo, gates)
    driver = gitrun_process(git_repo, "start", "r")
    try:
        _open(gates, TASKS[:4])
        wait_until(
            driver,
            lambda: _committed_outputs(git_repo) >= set(TASKS[:4]),
            60,
            what="t01-t04 landed",
        )
        # The user decides out/t06.json holds a secret, while t06 runs.
        (git_repo / ".gitignore").write_text("out/t06.json\n")
        _open(gates, TASKS[4:])
        _, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 1, err
    assert _committed_outputs(git_repo) == set(TASKS) - {"t06"}
    said = [line for line in err.splitlines() if "t06" in line and "ignored" in line]
    assert said == [
        "gitrun: t06: out/t06.json is ignored by git (.gitignore:1: out/t06.json), so gitrun "
        "did not commit it and the task is not done; stop ignoring it and `gitrun resume r` "
        "commits it from the disk"
    ], err
    status = json.loads(run_gitrun(git_repo, "status", "r", "--json").stdout)
    assert status["tasks"]["t06"]["status"] == "pending"
    assert (git_repo / "out/t06.json").is_file()  # kept on disk, for the user to judge
    # Once the rule goes, resume commits it from the disk without running it again.
    (git_repo / ".gitignore").unlink()
    proc = run_gitrun(git_repo, "resume", "r")
    assert proc.returncode == 0, proc.stderr
    assert _committed_outputs(git_repo) == set(TASKS)


def test_external_mode_collects_through_a_stash_and_its_pop(git_repo: Path) -> None:
    """An orchestrator's next and collect while the user's stash holds the
    ledger: the new chunks take names the branch does not hold, so nothing
    committed is replaced and the pop finds no file in its way."""
    tasks = TASKS[:4]
    write_run(
        git_repo,
        "r",
        [{"id": t, "outputs": [f"out/{t}.json"]} for t in tasks],
        {"executor": {"kind": "external"}, "limits": {"concurrency": 4}},
    )
    commit_all(git_repo, "define r")

    def handed(*args: str) -> list[str]:
        proc = run_gitrun(git_repo, *args, "--json", "--full")
        assert proc.returncode == 0, proc.stderr
        said = json.loads(proc.stdout)
        batch = said["leased"] if isinstance(said, dict) else said  # one object, or the list
        for item in batch:
            build_tree(git_repo, {f"out/{item['task']}.json": "{}\n"})
        return [str(item["task"]) for item in batch]

    def collect() -> None:
        proc = run_gitrun(git_repo, "collect", "r", "--json", "--full")
        assert proc.returncode == 0, proc.stderr

    assert handed("start", "r") == ["t01"]  # the canary
    collect()
    git(git_repo, "stash", "push", "-u", "-q")
    assert handed("next", "r") == tasks[1:]
    collect()
    git(git_repo, "stash", "pop", "-q")
    assert _committed_outputs(git_repo) == set(tasks)
    records = committed_ledger(git_repo)
    assert [r["event"] for r in records if "event" in r][:1] == ["start"]
    assert sorted(str(r["task"]) for r in records if r.get("outcome") == "valid") == tasks
    status = json.loads(run_gitrun(git_repo, "status", "r", "--json").stdout)
    assert status["counts"]["done"] == len(tasks)
