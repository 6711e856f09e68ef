"""Landing a run into the user's branch; reading its status, history and retries."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gitrun.cli.main import app
from gitrun.commands.land import locks
from gitrun.commands.land.landing import land_run
from gitrun.commands.session import start_run
from gitrun.definition.outputs import blob_on_disk
from gitrun.engine.crashpoints import LAND_POINTS
from gitrun.errors import GitrunError
from gitrun.store.local import LocalPaths
from tests.helpers import (
    build_tree,
    commit_all,
    fake_worker_run,
    git,
    git_env,
    run_gitrun,
    user_env,
    write_run,
)

quiet = lambda _line: None  # noqa: E731
runner = CliRunner()


@pytest.fixture
def finished(git_repo: Path) -> Path:
    fake_worker_run(git_repo, "r", 3, {})
    assert start_run(git_repo, "r", quiet).exit_code == 0
    return git_repo


def test_land_merges_with_identical_untracked_artifacts_present(finished: Path) -> None:
    # The workers' files are still in the work tree, untracked and identical.
    assert (finished / "out/t01.json").exists()
    message = land_run(finished, "r")
    assert "merged" in message
    parents = git(finished, "log", "-1", "--format=%P").split()
    assert len(parents) == 2
    assert git(finished, "status", "--porcelain", "--untracked-files=all", "out").strip() == ""
    assert "already landed" in land_run(finished, "r")


def test_land_refuses_a_different_untracked_file_and_changes_nothing(finished: Path) -> None:
    (finished / "out/t02.json").write_text('{"mine": true}\n')
    head = git(finished, "rev-parse", "HEAD")
    with pytest.raises(GitrunError, match=r"untracked out/t02.json would be overwritten"):
        land_run(finished, "r")
    assert git(finished, "rev-parse", "HEAD") == head
    assert (finished / "out/t02.json").read_text() == '{"mine": true}\n'
    assert (finished / "out/t01.json").exists()


def test_land_stops_on_a_conflicting_tracked_change(finished: Path) -> None:
    build_tree(finished, {"out/t03.json": "tracked by the user\n"})
    git(finished, "add", "out/t03.json")
    git(finished, "commit", "-q", "-m", "user's own t03")
    build_tree(finished, {"out/t03.json": "edited, not committed\n"})
    head = git(finished, "rev-parse", "HEAD")
    with pytest.raises(GitrunError, match="changed nothing"):
        land_run(finished, "r")
    assert git(finished, "rev-parse", "HEAD") == head
    assert (finished / "out/t03.json").read_text() == "edited, not committed\n"
    assert (finished / "out/t01.json").exists()


@pytest.mark.parametrize("squash", [False, True], ids=["merge", "squash"])
def test_land_keeps_staged_changes_staged_and_out_of_its_commit(
    finished: Path, squash: bool
) -> None:
    build_tree(finished, {"notes.txt": "staged\n", "README.md": "# sample\n\nstaged too\n"})
    git(finished, "add", "notes.txt", "README.md")
    build_tree(finished, {"README.md": "# sample\n\nstaged too\n\nand edited after\n"})
    land_run(finished, "r", squash=squash)
    assert len(git(finished, "log", "-1", "--format=%P").split()) == (1 if squash else 2)
    files = git(finished, "show", "--name-only", "--format=", "--first-parent", "HEAD").split()
    assert {"out/t01.json", "out/t02.json", "out/t03.json"} <= set(files)
    assert "notes.txt" not in files and "README.md" not in files
    status = git(finished, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert sorted(status) == ["A  notes.txt", "MM README.md"]
    assert git(finished, "show", ":README.md") == "# sample\n\nstaged too\n"


def test_land_refuses_a_staged_change_to_a_path_it_brings(finished: Path) -> None:
    build_tree(finished, {"out/t02.json": '{"staged": "by the user"}\n'})
    git(finished, "add", "out/t02.json")
    head = git(finished, "rev-parse", "HEAD")
    with pytest.raises(GitrunError, match=r"^out/t02\.json has staged changes the landing"):
        land_run(finished, "r")
    assert git(finished, "rev-parse", "HEAD") == head
    assert git(finished, "show", ":out/t02.json") == '{"staged": "by the user"}\n'


def test_status_json_and_log_json(finished: Path) -> None:
    result = runner.invoke(app, ["status", "r", "--json"])
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert data["run"] == "r"
    assert data["counts"] == {
        "done": 3,
        "up-to-date": 0,
        "pending": 0,
        "running": 0,
        "failed": 0,
    }
    assert data["spawns"] == 3 and data["usable"] == 3 and data["yield"] == 1.0
    assert data["tasks"]["t01"]["status"] == "done" and data["tasks"]["t01"]["attempts"] == 0
    result = runner.invoke(app, ["log", "r", "--json"])
    entries = json.loads(result.output)
    landed = sorted(t for e in entries for t in e["tasks"])
    assert landed == ["t01", "t02", "t03"]
    assert all(e["attempts"][t] == 1 for e in entries for t in e["tasks"])
    plain = runner.invoke(app, ["status"]).output
    assert plain.startswith("r: started; 3 done")


def test_retry_gives_failed_tasks_new_attempts(git_repo: Path) -> None:
    spec_path = fake_worker_run(
        git_repo, "r", 2, {"tasks": {"t02": "nowrite"}}, {"limits": {"max_attempts": 1}}
    )
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.status.tasks["t02"].status == "failed"
    result = runner.invoke(app, ["retry", "r", "t01"])
    assert result.exit_code == 1 and "t01 already done" in result.output
    spec_path.write_text(json.dumps({}))  # the worker behaves now
    result = runner.invoke(app, ["retry", "r"])
    assert result.exit_code == 0 and "t02" in result.output
    result = runner.invoke(app, ["resume", "r", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["counts"]["done"] == 2
    assert data["tasks"]["t02"]["last_attempt"] == 2


def test_status_of_a_run_not_started(git_repo: Path) -> None:
    fake_worker_run(git_repo, "r", 2, {})
    result = runner.invoke(app, ["status", "r", "--json"])
    data = json.loads(result.output)
    assert data["started"] is False and data["counts"]["pending"] == 2
    result = runner.invoke(app, ["resume", "r"])
    assert result.exit_code == 1 and "gitrun start r" in result.output


def test_outputs_with_glob_characters_are_literal_paths(git_repo: Path) -> None:
    tasks = [
        {"id": "t1", "outputs": ["out/[a].json"], "owns": ["out/\\[a\\].json"]},
        {"id": "t2", "outputs": ["out/a.json"]},
    ]
    # set -f: split the list, never glob it (out/[a].json would match t2's
    # out/a.json, which t1's sandbox shows as a read-only placeholder)
    script = "set -f; for p in $GITRUN_OUTPUTS; do echo '{}' > \"$p\"; done"
    write_run(git_repo, "g", tasks, {"executor": {"command": ["sh", "-c", script]}})
    outcome = start_run(git_repo, "g", quiet)
    assert outcome.exit_code == 0, outcome.status.to_json()
    assert sorted(t for t, s in outcome.status.tasks.items() if s.status == "done") == ["t1", "t2"]
    land_run(git_repo, "g")
    assert git(git_repo, "ls-files", "--", ":(literal)out/[a].json").strip() == "out/[a].json"


def test_copies_an_earlier_land_set_aside_go_back_and_a_lock_it_did_not_make_is_named(
    finished: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Copies an earlier gitrun's land moved out of git merge's way go back
    to their places; an index.lock no landing made is named and left alone."""
    monkeypatch.setattr(locks, "LOCK_PATIENCE", 0.1)
    aside = LocalPaths.of(finished, "r").land_aside
    (aside / "out").mkdir(parents=True)
    for name in ("t01.json", "t02.json"):
        (finished / "out" / name).rename(aside / "out" / name)
    lock = finished / ".git" / "index.lock"
    lock.write_text("")
    with pytest.raises(GitrunError, match=r"index\.lock exists, and no `gitrun land` made it"):
        land_run(finished, "r")
    assert lock.exists()
    assert (finished / "out/t01.json").exists() and (finished / "out/t02.json").exists()
    assert not aside.exists()
    lock.unlink()
    assert "merged" in land_run(finished, "r")
    assert git(finished, "status", "--porcelain", "--untracked-files=all").strip() == ""
    assert json.loads((finished / "out/t01.json").read_text()) is not None


def test_a_copy_set_aside_whose_bytes_git_holds_is_dropped_not_a_reason_to_stop(
    finished: Path,
) -> None:
    """The copy is the run's own output, so git has its bytes: it goes, and
    the landing judges what stands in its place now like any untracked file."""
    aside = LocalPaths.of(finished, "r").land_aside
    (aside / "out").mkdir(parents=True)
    (finished / "out/t01.json").rename(aside / "out/t01.json")
    (finished / "out/t01.json").write_text('{"someone": "else"}\n')
    with pytest.raises(GitrunError, match=r"^untracked out/t01\.json would be overwritten"):
        land_run(finished, "r")
    assert not aside.exists()
    assert (finished / "out/t01.json").read_text() == '{"someone": "else"}\n'
    (finished / "out/t01.json").unlink()
    assert "merged" in land_run(finished, "r")


def test_a_copy_set_aside_that_exists_nowhere_else_is_kept_and_said(finished: Path) -> None:
    aside = LocalPaths.of(finished, "r").land_aside
    (aside / "out").mkdir(parents=True)
    (aside / "out/t01.json").write_text('{"only": "here"}\n')  # in no commit, not in its place
    said = land_run(finished, "r")
    assert "merged" in said
    [note] = said.splitlines()[1:]
    assert note.startswith(f"kept out/t01.json in {aside}: an earlier `gitrun land` set it aside")
    assert (aside / "out/t01.json").read_text() == '{"only": "here"}\n'


def test_a_huge_untracked_file_in_the_way_is_refused_not_read(finished: Path) -> None:
    with open(finished / "out/t01.json", "wb") as handle:
        handle.truncate(200 * 1024**3)  # sparse: no disk used
    with pytest.raises(GitrunError, match=r"untracked out/t01\.json would be overwritten"):
        land_run(finished, "r")


def test_log_attempts_prints_the_ledger_records_one_a_line(finished: Path) -> None:
    result = runner.invoke(app, ["log", "r", "--attempts"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.output.splitlines()]
    assert sorted(r["task"] for r in records) == ["t01", "t02", "t03"]
    for record in records:
        assert record["v"] == 1 and record["outcome"] == "valid" and record["attempt"] == 1
        assert {"stage", "started", "ended", "duration", "exit", "signal", "timed_out"} <= set(
            record
        )


def test_attempt_records_in_log_json_and_status_json(finished: Path) -> None:
    listed = runner.invoke(app, ["log", "r", "--attempts", "--json"])
    assert listed.exit_code == 0, listed.output
    records = sorted(json.loads(listed.output), key=lambda r: (r["task"], r["attempt"]))
    assert [r["task"] for r in records] == ["t01", "t02", "t03"]
    status = runner.invoke(app, ["status", "r", "--json"])
    assert status.exit_code == 0, status.output
    tasks = json.loads(status.output)["tasks"]
    # status names each task's attempts: the very records of the ledger.
    assert [r for tid in sorted(tasks) for r in tasks[tid]["records"]] == records


@pytest.fixture
def unfinished(git_repo: Path) -> Path:
    """A run whose t02 failed for good: 2 of 3 tasks done."""
    fake_worker_run(
        git_repo, "r", 3, {"tasks": {"t02": "nowrite"}}, {"limits": {"max_attempts": 1}}
    )
    assert start_run(git_repo, "r", quiet).exit_code == 1
    return git_repo


def test_land_refuses_an_unfinished_run_and_changes_nothing(unfinished: Path) -> None:
    head = git(unfinished, "rev-parse", "HEAD")
    result = runner.invoke(app, ["-C", str(unfinished), "land", "r"])
    assert result.exit_code == 1, result.output
    [line] = result.output.strip().splitlines()
    assert "run 'r' is not finished: 2 of 3 tasks done, 0 pending and 1 failed" in line
    assert "`gitrun land r --partial`" in line and "`gitrun status r`" in line
    assert git(unfinished, "rev-parse", "HEAD") == head


def test_land_partial_lands_what_is_done_and_says_what_it_leaves_out(unfinished: Path) -> None:
    said = land_run(unfinished, "r", partial=True)
    assert "merged" in said and "left out: 0 pending and 1 failed of 3 tasks" in said, said
    landed = git(unfinished, "ls-tree", "-r", "--name-only", "HEAD", "out").split()
    assert landed == ["out/t01.json", "out/t03.json"]


def test_land_partial_of_a_finished_run_is_refused_with_the_reason(finished: Path) -> None:
    with pytest.raises(GitrunError, match="every task of run 'r' is done, so --partial means"):
        land_run(finished, "r", partial=True)
    assert "merged" in land_run(finished, "r")


# -- a land killed at any instant ----------------------------------------------

KILLED_OUTPUTS = 300
README_EDIT = "# sample\n\nthe user's edit, not committed\n"
MINE = "an untracked file of the user's\n"


@pytest.fixture(scope="module")
def landable(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of 300 outputs, still in the work tree as its workers
    left them; made once, each test lands a copy (:func:`_as_the_user_has_it`)."""
    root = tmp_path_factory.mktemp("landable")
    with pytest.MonkeyPatch.context() as env:
        for key in list(os.environ):
            if key.startswith(("GIT_", "GITRUN_")):
                env.delenv(key)
        for key, value in git_env(root).items():
            env.setenv(key, value)
        env.setenv("GITRUN_MAX_LOAD", "1000000")
        repo = root / "repo"
        repo.mkdir()
        git(repo, "init", "-q")
        build_tree(repo, {"README.md": "# sample\n"})
        commit_all(repo, "initial")
        tasks: list[dict[str, object]] = [
            {"id": f"t{n:03d}", "outputs": [f"out/t{n:03d}.json"]}
            for n in range(1, KILLED_OUTPUTS + 1)
        ]
        script = 'printf \'{"task": "%s"}\\n\' "$GITRUN_TASK" > "$GITRUN_OUTPUTS"'
        # Unconfined: what is landed does not depend on how it was made, and
        # 300 confined attempts cost the fixture ten times the time.
        executor = {"command": ["sh", "-c", script], "isolation": "none"}
        packet = {"executor": executor, "limits": {"concurrency": 8}}
        write_run(repo, "r", tasks, packet)
        assert start_run(repo, "r", quiet).exit_code == 0
    return repo


def _as_the_user_has_it(landable: Path, dest: Path) -> Path:
    """A copy of the landable repository with an uncommitted edit of
    README.md, an untracked file of the user's, and every other output gone
    from the work tree (as on another machine), so the landing writes files."""
    shutil.copytree(landable, dest, symlinks=True)
    (dest / "README.md").write_text(README_EDIT)
    (dest / "mine.txt").write_text(MINE)
    for n in range(1, KILLED_OUTPUTS + 1, 2):
        (dest / f"out/t{n:03d}.json").unlink()
    return dest


def _land_process(repo: Path, *args: str, crash_at: str = "") -> subprocess.Popen[bytes]:
    env = user_env()
    if crash_at:
        env["GITRUN_CRASH_AT"] = crash_at
    return subprocess.Popen(
        [sys.executable, "-m", "gitrun", "land", "r", *args],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own group: a kill takes its git commands too
    )


def _assert_landed_whole(repo: Path, squash: bool = False) -> None:
    """The user's edit, untracked file and branch are intact, the branch has
    the landing, every file of the run is the run's blob, tracked, with
    fresh stat data, and nothing of a landing is left behind."""
    tip = git(repo, "rev-parse", "gitrun/r").strip()
    assert (repo / "README.md").read_text() == README_EDIT
    assert (repo / "mine.txt").read_text() == MINE
    locks = [p for p in (repo / ".git").rglob("*.lock") if "gitrun" not in p.parts]
    assert locks == []
    first, *rest = git(repo, "log", "-1", "--format=%P").split()
    assert git(repo, "log", "-1", "--format=%s", first).strip() == "initial"
    assert rest == ([] if squash else [tip])
    files = git(repo, "ls-tree", "-r", "-z", "--full-tree", tip).split("\0")
    run_files = {e.split("\t")[1]: e.split()[2] for e in files if e and "\tREADME.md" not in e}
    assert len([p for p in run_files if p.startswith("out/")]) == KILLED_OUTPUTS
    assert {p: blob_on_disk(repo / p) for p in run_files} == run_files
    status = git(repo, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert sorted(status) == [" M README.md", "?? mine.txt"]
    assert git(repo, "diff-files", "--name-only").split() == ["README.md"]
    local = LocalPaths.of(repo, "r")
    for leftover in (local.land_journal, local.land_staging, local.land_index, local.land_claim):
        assert not leftover.exists(), leftover


def test_a_land_killed_at_each_tenth_of_its_time_is_finished_by_the_next(
    landable: Path, tmp_path: Path
) -> None:
    """The whole process group, git commands and all, killed with SIGKILL at
    10%, 20%, ... 90% of an unkilled landing's time: the next land finishes."""
    repo = _as_the_user_has_it(landable, tmp_path / "unkilled")
    began = time.monotonic()
    proc = _land_process(repo)
    _out, err = proc.communicate(timeout=60)
    took = time.monotonic() - began
    assert proc.returncode == 0, err.decode()
    _assert_landed_whole(repo)
    for tenth in range(1, 10):
        repo = _as_the_user_has_it(landable, tmp_path / f"killed-at-{tenth}0")
        proc = _land_process(repo)
        time.sleep(took * tenth / 10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
        said = land_run(repo, "r")
        assert "merged" in said or "already landed" in said, (tenth, said)
        _assert_landed_whole(repo)


def test_the_locks_an_update_ref_killed_with_the_land_left_are_cleared_by_the_next(
    landable: Path, tmp_path: Path
) -> None:
    """A `git update-ref` of the checked-out branch holds the branch's lock
    and HEAD.lock (for HEAD's reflog); killed with its land, it leaves both.
    The next land clears them (made after the journal said the branch was
    moving, open in no process) and finishes. Seen once as a flake of the
    kill-at-each-tenth test above."""
    repo = _as_the_user_has_it(landable, tmp_path / "repo")
    proc = _land_process(repo, crash_at="land.moving:1")
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, err.decode()
    branch = git(repo, "symbolic-ref", "HEAD").strip()
    left = [repo / ".git" / f"{branch}.lock", repo / ".git/HEAD.lock"]
    for lock in left:  # as the killed update-ref left them
        lock.write_text(git(repo, "rev-parse", "HEAD"))
    said = land_run(repo, "r")
    assert "merged" in said, said
    _assert_landed_whole(repo)
    assert not any(lock.exists() for lock in left)


def test_a_head_lock_nobody_s_land_made_is_named_and_left_alone(
    landable: Path, tmp_path: Path
) -> None:
    """A HEAD.lock there before the land began is another git command's: the
    land refuses with the file's name, and removes nothing."""
    repo = _as_the_user_has_it(landable, tmp_path / "repo")
    lock = repo / ".git/HEAD.lock"
    lock.write_text("another git command's\n")
    with pytest.raises(GitrunError, match=r"HEAD\.lock exists, and no `gitrun land` made it"):
        land_run(repo, "r")
    assert lock.read_text() == "another git command's\n"


# Each plan: the crash points of successive lands, then one that finishes.
CRASH_PLANS = [[f"{point}:1"] for point in LAND_POINTS] + [
    ["land.file:75"],  # half way through the files it writes
    pytest.param(["land.file:150"], marks=pytest.mark.soak),  # at the last
    ["land.file:3", "land.file:3", "land.holding:1"],  # and so do the next two
]


@pytest.mark.parametrize("plan", CRASH_PLANS, ids="+".join)
def test_a_land_killed_at_each_step_is_finished_by_the_next(
    landable: Path, tmp_path: Path, plan: list[str]
) -> None:
    repo = _as_the_user_has_it(landable, tmp_path / "repo")
    for crash_at in plan:
        proc = _land_process(repo, crash_at=crash_at)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL, (crash_at, err.decode())
    if plan[-1] == "land.holding:1":  # it died holding git's index lock
        assert (repo / ".git/index.lock").exists()
    if LocalPaths.of(repo, "r").land_journal.exists():  # status says how to go on
        shown = run_gitrun(repo, "status", "r").stdout
        assert "a `gitrun land r` stopped half way; run it again" in shown, shown
    said = land_run(repo, "r")
    assert "merged" in said, said
    _assert_landed_whole(repo)


@pytest.mark.parametrize(
    "crash_at",
    [
        pytest.param("land.moved:1", marks=pytest.mark.soak),
        "land.file:10",
        pytest.param("land.holding:1", marks=pytest.mark.soak),
    ],
)
def test_a_squashed_land_killed_at_a_step_is_finished_by_the_next(
    landable: Path, tmp_path: Path, crash_at: str
) -> None:
    repo = _as_the_user_has_it(landable, tmp_path / "repo")
    proc = _land_process(repo, "--squash", crash_at=crash_at)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, err.decode()
    said = land_run(repo, "r")  # the flag is the stopped landing's, not this one's
    assert "squashed into one commit" in said, said
    _assert_landed_whole(repo, squash=True)


def test_a_ref_lock_left_by_a_landing_killed_while_it_moved_the_branch_is_removed(
    finished: Path,
) -> None:
    proc = _land_process(finished, crash_at="land.moving:1")
    assert proc.wait(timeout=60) == -signal.SIGKILL
    head = git(finished, "rev-parse", "HEAD").strip()
    lock = finished / ".git/refs/heads/main.lock"
    lock.write_text(head + "\n")  # as a killed `git update-ref` leaves it
    assert "merged" in land_run(finished, "r")
    assert not lock.exists()
    assert git(finished, "rev-parse", "HEAD^1").strip() == head


def test_an_index_lock_is_a_dead_landings_own_only_while_its_claim_file_is_there(
    finished: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal names the lock's inode; once the claim file that keeps
    that inode taken is gone, a file with that inode could be anyone's."""
    monkeypatch.setattr(locks, "LOCK_PATIENCE", 0.1)
    proc = _land_process(finished, crash_at="land.holding:1")
    assert proc.wait(timeout=60) == -signal.SIGKILL
    local, lock = LocalPaths.of(finished, "r"), finished / ".git/index.lock"
    assert lock.exists() and lock.stat().st_ino == local.land_claim.stat().st_ino
    local.land_claim.unlink()
    with pytest.raises(GitrunError, match=r"index\.lock exists, and no `gitrun land` made it"):
        land_run(finished, "r")
    assert lock.exists()
    lock.unlink()
    assert "finishing what a stopped `gitrun land` had begun" in land_run(finished, "r")


HOLD_THE_LOCK = """
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL)
print("holding", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("after_a_dead_land", [False, True], ids=["alone", "after-a-dead-land"])
def test_an_index_lock_a_live_process_holds_is_named_and_never_removed(
    finished: Path, monkeypatch: pytest.MonkeyPatch, after_a_dead_land: bool
) -> None:
    """A live process made .git/index.lock and holds it: land names its pid
    and leaves the lock, even when a land killed at its index step says
    it was about to take that very lock."""
    monkeypatch.setattr(locks, "LOCK_PATIENCE", 0.3)
    if after_a_dead_land:
        proc = _land_process(finished, crash_at="land.indexing:1")
        assert proc.wait(timeout=60) == -signal.SIGKILL
    head = git(finished, "rev-parse", "HEAD")
    lock = finished / ".git/index.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_LOCK, str(lock)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
        with pytest.raises(GitrunError, match=rf"index\.lock is held open by pid {holder.pid} "):
            land_run(finished, "r")
        assert lock.exists()
        if not after_a_dead_land:
            assert git(finished, "rev-parse", "HEAD") == head
    finally:
        holder.kill()
        holder.wait()
    with pytest.raises(GitrunError, match=r"index\.lock exists, and no `gitrun land` made it"):
        land_run(finished, "r")  # dead now, but it was not a landing's
    assert lock.exists()
    lock.unlink()
    assert "merged" in land_run(finished, "r")
    assert git(finished, "status", "--porcelain", "--untracked-files=all").strip() == ""


def test_a_second_land_while_one_runs_is_refused_with_its_pid(finished: Path) -> None:
    local = LocalPaths.of(finished, "r")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_FLOCK, str(local.land_lock)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
        with pytest.raises(GitrunError, match=r"a `gitrun land r` is running already"):
            land_run(finished, "r")
    finally:
        holder.kill()
        holder.wait()
    assert "merged" in land_run(finished, "r")


HOLD_FLOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("holding", flush=True)
time.sleep(60)
"""


def test_a_landing_counts_its_files_in_words_one_file_or_more(finished: Path) -> None:
    """The first landing brings many files; a round where every task was up to
    date brings only its ledger's new chunk: "(1 file)", not "(1 files)"."""
    assert re.search(r"\(\d+ files\)$", land_run(finished, "r"))
    assert start_run(finished, "r", quiet).exit_code == 0  # a new round, nothing to run
    assert land_run(finished, "r").endswith("(1 file)")
