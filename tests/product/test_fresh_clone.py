"""A fresh clone of a repository whose run pushed its branch: every command
reads the same branch (the remote's copy, origin/gitrun/<run>) and tells the
same story."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import build_tree, commit_all, git, run_gitrun, write_run


def test_every_command_reads_the_pushed_branch_on_a_fresh_clone(
    git_repo: Path, tmp_path: Path
) -> None:
    remote = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(git_repo, "remote", "add", "origin", str(remote))
    # t3's worker writes nothing: it fails for good after its one attempt.
    script = 'case "$GITRUN_TASK" in t3) exit 1;; esac; echo "{}" > "$GITRUN_OUTPUTS"'
    write_run(
        git_repo,
        "r",
        [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in (1, 2, 3)],
        {
            "executor": {"command": ["sh", "-c", script]},
            "limits": {"max_attempts": 1, "canary": 0},
        },
    )
    commit_all(git_repo, "define r")
    started = run_gitrun(git_repo, "start", "r")
    assert started.returncode == 1, started.stderr  # t3 failed
    git(git_repo, "push", "-q", "origin", "main", "gitrun/r")
    here = json.loads(run_gitrun(git_repo, "status", "r", "--json").stdout)["counts"]
    assert (here["done"], here["failed"]) == (2, 1)
    history = run_gitrun(git_repo, "log", "r").stdout.splitlines()

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(remote), str(clone))
    assert git(clone, "branch", "--list", "gitrun/r") == ""  # only origin/gitrun/r

    status = run_gitrun(clone, "status", "r", "--json")
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["started"] and data["counts"] == here
    logged = run_gitrun(clone, "log", "r")
    assert logged.returncode == 0, logged.stderr
    assert logged.stdout.splitlines() == history
    start = run_gitrun(clone, "start", "r")
    assert start.returncode == 1
    assert "origin/gitrun/r" in start.stderr and "gitrun resume r" in start.stderr
    retry = run_gitrun(clone, "retry", "r")
    assert retry.returncode == 0, retry.stderr
    assert "t3" in retry.stdout
    # retry took the branch, and wrote its record after the committed ones.
    assert git(clone, "rev-parse", "gitrun/r") == git(clone, "rev-parse", "origin/gitrun/r")
    after = json.loads(run_gitrun(clone, "status", "r", "--json").stdout)["counts"]
    assert after["done"] == 2 and after["failed"] == 0


def test_the_local_branch_wins_and_origin_is_read_first(git_repo: Path) -> None:
    """The local branch is the run even when a remote's copy is ahead of it;
    without one, origin's copy comes before another remote's."""
    from gitrun.store.branches import find_tip

    first = git(git_repo, "rev-parse", "HEAD").strip()
    git(git_repo, "commit", "-q", "--allow-empty", "-m", "later")
    later = git(git_repo, "rev-parse", "HEAD").strip()
    git(git_repo, "update-ref", "refs/remotes/aaa/gitrun/r", first)
    git(git_repo, "update-ref", "refs/remotes/origin/gitrun/r", later)
    found = find_tip(git_repo, "r")
    assert found is not None and (found.shown, found.tip) == ("origin/gitrun/r", later)
    git(git_repo, "update-ref", "refs/heads/gitrun/r", first)  # behind origin's copy
    found = find_tip(git_repo, "r")
    assert found is not None and (found.shown, found.tip) == ("gitrun/r", first)


# The output is the input's text (its line ends dropped), as JSON; each task
# it ran is logged, so a test knows what was dispatched.
EOL_WORKER = (
    'printf "%s\\n" "$GITRUN_TASK" >> "$RAN_LOG"; '
    'printf \'{"text": "%s"}\\n\' "$(tr -d \'\\r\\n\' < "$GITRUN_INPUTS")" > "$GITRUN_OUTPUTS"'
)


def _clone(origin: Path, to: Path, autocrlf: bool) -> Path:
    """A clone of ``origin``'s main alone (a landed run's branch is not needed:
    the landed commit holds its ledger), checking text out with CRLF or not."""
    eol = ["-c", "core.autocrlf=true"] if autocrlf else []
    git(origin.parent, "clone", "-q", "--single-branch", *eol, str(origin), str(to))
    wanted = b"doc 1\r\n" if autocrlf else b"doc 1\n"
    assert (to / "docs/d1.txt").read_bytes() == wanted  # git converted it, or not
    return to


@pytest.mark.parametrize("made_with_autocrlf", [True, False])
def test_a_landed_run_is_up_to_date_in_clones_with_either_line_ending(
    git_repo: Path, tmp_path: Path, made_with_autocrlf: bool
) -> None:
    """A run landed in a clone that checks text out with CRLF (or LF) is up
    to date in clones of that commit with either: an input's identity is
    the blob git stores for it (its end-of-line conversion applied), not
    the bytes one work tree holds."""
    log = tmp_path / "ran.log"
    build_tree(git_repo, {f"docs/d{i}.txt": f"doc {i}\n" for i in (1, 2, 3)})
    tasks: list[dict[str, object]] = [
        {"id": f"t{i}", "inputs": [f"docs/d{i}.txt"], "outputs": [f"out/d{i}.json"]}
        for i in (1, 2, 3)
    ]
    command = ["sh", "-c", EOL_WORKER]
    write_run(
        git_repo, "r", tasks, {"executor": {"command": command, "env": {"RAN_LOG": str(log)}}}
    )
    commit_all(git_repo, "define r")
    made = _clone(git_repo, tmp_path / "made", made_with_autocrlf)
    for args in (["start", "r", "-q"], ["land", "r"]):
        proc = run_gitrun(made, *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(log.read_text().split()) == ["t1", "t2", "t3"]
    log.unlink()

    for name, autocrlf in (("crlf", True), ("lf", False)):
        clone = _clone(made, tmp_path / name, autocrlf)
        checked = run_gitrun(clone, "check", "r")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "3 of 3 tasks are up to date, 0 will run" in checked.stdout + checked.stderr, name
        started = run_gitrun(clone, "start", "r", "-q")
        assert started.returncode == 0, started.stdout + started.stderr
        assert not log.exists(), f"{name}: {log.read_text()} ran again"
        status = json.loads(run_gitrun(clone, "status", "r", "--json").stdout)
        assert status["counts"]["up-to-date"] == 3, (name, status["counts"])


def test_status_reads_a_run_defined_only_on_its_pushed_branch(
    git_repo: Path, tmp_path: Path
) -> None:
    """The run's definition was never committed to main: a fresh clone has it
    only on origin/gitrun/r, where `resume` and `log` find it. `status` reads
    it from there too (writing nothing), with its counts; one run, or all."""
    remote = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(git_repo, "remote", "add", "origin", str(remote))
    script = 'case "$GITRUN_TASK" in t3) exit 1;; esac; echo "{}" > "$GITRUN_OUTPUTS"'
    write_run(
        git_repo,
        "r",
        [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in (1, 2, 3)],
        {"executor": {"command": ["sh", "-c", script]}, "limits": {"max_attempts": 1}},
    )
    started = run_gitrun(git_repo, "start", "r")
    assert started.returncode == 1, started.stderr  # t3 failed
    git(git_repo, "push", "-q", "origin", "main", "gitrun/r")
    assert git(git_repo, "ls-tree", "-r", "--name-only", "main", ".gitrun") == ""

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(remote), str(clone))
    assert not (clone / ".gitrun").exists()
    status = run_gitrun(clone, "status", "r", "--json")
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["started"] and (data["counts"]["done"], data["counts"]["failed"]) == (2, 1)
    assert data["tasks"]["t3"]["kind"] == "missing"
    text = run_gitrun(clone, "status", "r")
    assert text.returncode == 0, text.stderr
    assert "total: 2 done, 0 running, 0 pending, 1 failed" in text.stdout, text.stdout
    assert "t3" in text.stdout and "gitrun new" not in text.stdout
    # Nothing was written: no run directory, no local branch, no local state.
    assert not (clone / ".gitrun").exists()
    assert git(clone, "branch", "--list", "gitrun/r") == ""
    assert git(clone, "status", "--porcelain") == ""
