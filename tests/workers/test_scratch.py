"""Every attempt in a scratch directory of its own: its inputs in, its declared outputs out.

``[executor] isolation = "scratch"`` needs no namespaces: a careless worker's
writes in its working directory land in the scratch directory and are named,
never brought back; the neighbour's task is done only by its own attempt; a
driver killed with kill -9 leaves nothing that a resume does not bring back
or clean away.
"""

from __future__ import annotations

import json
import signal
import tempfile
from pathlib import Path

import pytest

from gitrun.commands.session import resume_run, start_run
from gitrun.definition.load import load_run
from gitrun.proof.check import check_run
from tests.helpers import (
    build_tree,
    commit_all,
    git,
    gitrun_process,
    ledger_records,
    wait_until,
    write_run,
)
from tests.workers.test_sandbox import CARELESS

quiet = lambda _line: None  # noqa: E731


@pytest.fixture
def scratch_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary directory scratch directories are made in, here and in child processes."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setenv("TMPDIR", str(root))
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def _shell_run(repo: Path, script: str, tasks: list[dict[str, object]], **limits: object) -> None:
    packet = {
        "executor": {"preset": "shell", "shell": script, "isolation": "scratch"},
        "limits": {"canary": 0, "timeout": "60s", **limits},
        "ownership": {"protected": ["SECRET.txt"]},
        "stages": [{"name": "one"}, {"name": "two"}],
    }
    write_run(repo, "r", tasks, packet)
    commit_all(repo, "run r")


def _tasks(*ids: str) -> list[dict[str, object]]:
    return [{"id": t, "stage": "one", "outputs": [f"out/{t}.json"]} for t in ids]


def _left(scratch_root: Path, repo: Path) -> list[Path]:
    return [*scratch_root.glob("gitrun-attempt-*"), *repo.glob(".git/gitrun/r/sandbox/*")]


def test_a_careless_worker_in_scratch_changes_nothing_of_anyone_else(
    git_repo: Path, scratch_root: Path
) -> None:
    build_tree(git_repo, {"SECRET.txt": "mine\n"})
    commit_all(git_repo, "secret")
    config = (git_repo / ".git/config").read_bytes()
    _shell_run(git_repo, CARELESS, _tasks("t1", "t2"), concurrency=1)
    said: list[str] = []
    outcome = start_run(git_repo, "r", said.append)
    assert outcome.exit_code == 0 and outcome.violations == [], said
    assert any("each attempt runs in a scratch directory of its own" in s for s in said)
    for task in ("t1", "t2"):
        assert git(git_repo, "show", f"gitrun/r:out/{task}.json") == f'{{"task": "{task}"}}\n'
    outcomes = [(r["task"], r["outcome"]) for r in ledger_records(git_repo) if "outcome" in r]
    assert sorted(outcomes) == [("t1", "valid"), ("t2", "valid")]
    assert (git_repo / "SECRET.txt").read_text() == "mine\n"
    assert (git_repo / ".git/config").read_bytes() == config
    # There is no git directory in a scratch directory to write in.
    assert "config: refused" in (git_repo / ".git/gitrun/r/logs/t1.1.log").read_text()
    [stray] = [r for r in ledger_records(git_repo) if r.get("event") == "stray"]
    assert stray["task"] == "t1" and stray["paths"] == ["SECRET.txt", "out/t2.json"]
    assert any(
        "t1 attempt 1 wrote SECRET.txt, out/t2.json, which it does not own" in s for s in said
    )
    assert _left(scratch_root, git_repo) == []


def test_a_scratch_attempt_reads_its_inputs_and_its_packet_there(
    git_repo: Path, scratch_root: Path
) -> None:
    """An earlier stage's output, a file of the base commit and the packet are
    in the scratch directory; nothing else of the repository is."""
    build_tree(git_repo, {"docs/a.md": "alpha\n", "docs/b.md": "beta\n"})
    commit_all(git_repo, "docs")
    script = (
        'test "$GITRUN_REPO" = "$PWD" || exit 7; '
        "test -e docs/b.md && exit 8; "
        'if [ "$GITRUN_TASK" = sum ]; then '
        "cat out/t1.json docs/a.md > out/sum.txt && grep -q 'isolation' \"$GITRUN_PACKET\" "
        '|| exit 9; else printf \'{"task": "%s"}\\n\' "$GITRUN_TASK" > "out/$GITRUN_TASK.json"; fi'
    )
    tasks: list[dict[str, object]] = [
        *_tasks("t1"),
        {
            "id": "sum",
            "stage": "two",
            "inputs": ["out/t1.json", "docs/a.md"],
            "outputs": ["out/sum.txt"],
        },
    ]
    _shell_run(git_repo, script, tasks)
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.status.counts()["done"] == 2, outcome.status.tasks
    assert (git_repo / "out/sum.txt").read_text() == '{"task": "t1"}\nalpha\n'
    assert _left(scratch_root, git_repo) == []


def test_an_output_over_the_cap_stays_in_scratch_and_is_invalid(
    git_repo: Path, scratch_root: Path
) -> None:
    script = 'head -c 5000 /dev/zero | tr "\\0" x > "out/$GITRUN_TASK.json"'
    _shell_run(git_repo, script, _tasks("t1"), max_attempts=1, max_output_bytes=1000)
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.status.counts()["failed"] == 1
    [record] = [r for r in ledger_records(git_repo) if "outcome" in r]
    assert record["outcome"] == "invalid"
    assert "over limits.max_output_bytes" in str(record["reason"]), record
    assert not (git_repo / "out/t1.json").exists()
    assert _left(scratch_root, git_repo) == []


def test_kill_9_of_the_driver_then_resume_brings_back_what_the_orphan_wrote(
    git_repo: Path, tmp_path: Path, scratch_root: Path
) -> None:
    wrote = tmp_path / "wrote"
    script = (
        'printf \'{"task": "%s"}\\n\' "$GITRUN_TASK" > "out/$GITRUN_TASK.json"; '
        "printf x > out/stray.json; "
        f'echo "$GITRUN_ATTEMPT" >> "{wrote}.$GITRUN_TASK"; sleep 60'
    )
    _shell_run(git_repo, script, _tasks("t1", "t2"))
    driver = gitrun_process(git_repo, "start", "r", capture=False)
    wait_until(driver, lambda: all(Path(f"{wrote}.{t}").exists() for t in ("t1", "t2")))
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    assert not (git_repo / "out/t1.json").exists()  # still in its scratch directory
    said: list[str] = []
    outcome = resume_run(git_repo, "r", said.append)
    assert outcome.exit_code == 0, said
    for task in ("t1", "t2"):
        assert Path(f"{wrote}.{task}").read_text() == "1\n"  # one attempt each, never again
        assert git(git_repo, "show", f"gitrun/r:out/{task}.json") == f'{{"task": "{task}"}}\n'
    outcomes = [(r["task"], r["outcome"]) for r in ledger_records(git_repo) if "outcome" in r]
    assert sorted(outcomes) == [("t1", "valid"), ("t2", "valid")]
    strays = [r for r in ledger_records(git_repo) if r.get("event") == "stray"]
    assert sorted(str(r["task"]) for r in strays) == ["t1", "t2"]
    assert not (git_repo / "out/stray.json").exists()
    assert _left(scratch_root, git_repo) == []


def test_a_scratch_directory_left_before_the_spawn_is_cleaned_by_the_next_driver(
    git_repo: Path, scratch_root: Path
) -> None:
    """A driver killed after it made an attempt's scratch directory and
    before it started the worker leaves a directory only its state names."""
    from gitrun.store.local import LocalPaths
    from gitrun.workers.scratch import Scratch

    _shell_run(git_repo, 'printf "{}" > "out/$GITRUN_TASK.json"', _tasks("t1"))
    local = LocalPaths.of(git_repo, "r")
    Scratch(git_repo, local.sandboxes / "dead0001", ("out/t1.json",), 1000).start({"a": b"x"})
    assert len(list(scratch_root.glob("gitrun-attempt-*"))) == 1
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 0
    assert _left(scratch_root, git_repo) == []


def test_check_refuses_scratch_for_the_claude_preset(git_repo: Path) -> None:
    packet = {"executor": {"preset": "claude", "isolation": "scratch"}}
    write_run(git_repo, "r", _tasks("t1"), {**packet, "stages": [{"name": "one"}]})
    problems = check_run(load_run(git_repo, "r"), check_dirty=False).problems
    [problem] = [p for p in problems if p.code == "isolation"]
    assert "its write hooks read the repository" in problem.message


def test_a_forged_state_never_removes_what_gitrun_did_not_make(
    git_repo: Path, tmp_path: Path, scratch_root: Path
) -> None:
    """A worker that is not confined can write the git directory: a state
    naming another directory is unreadable, and nothing of it is touched."""
    from gitrun.store.local import LocalPaths

    _shell_run(git_repo, 'printf "{}" > "out/$GITRUN_TASK.json"', _tasks("t1"))
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("mine")
    folder = LocalPaths.of(git_repo, "r").sandboxes / "forged01"
    folder.mkdir(parents=True)
    state = {"kind": "scratch", "place": str(precious), "outputs": [], "max_output_bytes": 1}
    (folder / "state.json").write_text(json.dumps({**state, "given": {}, "given_outputs": {}}))
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 0
    assert (precious / "keep.txt").read_text() == "mine"
    assert _left(scratch_root, git_repo) == []


def test_a_link_planted_at_the_temporary_name_never_carries_the_write(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """write_beneath's temporary file is made anew under a name nobody can
    guess: a hard link to .git/config planted where it would go (at the
    name an earlier gitrun used, or at the very name it draws) is never
    written through."""
    import os
    import secrets

    from gitrun.workers.scratch import write_beneath

    config = git_repo / ".git" / "config"
    before = config.read_bytes()
    os.link(config, git_repo / f".r.html.gitrun-{os.getpid()}.tmp")  # the old, guessable name
    write_beneath(git_repo, "r.html", b"REPORT", replace=False)
    assert (git_repo / "r.html").read_bytes() == b"REPORT" and config.read_bytes() == before
    monkeypatch.setattr(secrets, "token_hex", lambda _n: "guessed")
    os.link(config, git_repo / ".s.html.gitrun-guessed.tmp")
    with pytest.raises(FileExistsError):
        write_beneath(git_repo, "s.html", b"REPORT", replace=False)
    assert config.read_bytes() == before and not (git_repo / "s.html").exists()
