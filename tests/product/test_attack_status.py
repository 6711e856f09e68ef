"""Attacks on status, start into closed pipes, the regular-file reader and
diff-tree: each test is a way a careless user or an odd file broke a
promise. A definition that does not load must give load_run's one-sentence
error, never a stale answer or a traceback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gitrun.definition.load import load_run
from gitrun.definition.sources import source_key
from gitrun.engine.status import read_status
from gitrun.errors import GitrunError
from gitrun.store import git as gitdoor
from gitrun.store.regular import NotRegular, read_regular
from tests.helpers import commit_all, fake_worker_run, git, run_gitrun, write_run


@pytest.fixture
def defined(git_repo: Path) -> Path:
    """A run defined and committed, never started."""
    write_run(git_repo, "r", [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(3)])
    commit_all(git_repo, "define")
    return git_repo


def _load_error(repo: Path) -> str:
    with pytest.raises(GitrunError) as caught:
        load_run(repo, "r")
    return "\n".join(f"gitrun: error: {line}" for line in caught.value.lines)


@pytest.fixture
def driven(git_repo: Path) -> Path:
    """A run driven to its end: t1 and t3 done, t2 failed for good, over two stages."""
    fake_worker_run(
        git_repo,
        "r",
        3,
        {"tasks": {"t02": "nowrite"}},
        packet={
            "limits": {"max_attempts": 2, "canary": 0, "timeout": 60},
            "stages": [{"name": "one"}, {"name": "two"}],
        },
    )
    tasks = (git_repo / ".gitrun/runs/r/tasks.toml").read_text()
    tasks = tasks.replace('id = "t03"', 'id = "t03"\nstage = "two"')
    (git_repo / ".gitrun/runs/r/tasks.toml").write_text(tasks)
    commit_all(git_repo, "define")
    assert run_gitrun(git_repo, "start", "r").returncode == 1
    return git_repo


def _full(repo: Path) -> object:
    """The status of the loaded definition, as ``status --json`` prints it."""
    status = read_status(repo, "r", load_run(repo, "r"), landing=True)
    return json.loads(json.dumps(status.to_json()))


# -- what the key must cover ---------------------------------------------------------


def test_a_linked_config_is_keyed_by_what_it_points_to(defined: Path) -> None:
    shared = defined / "shared.toml"
    shared.write_text("[limits]\nmax_attempts = 5\n")
    (defined / ".gitrun/config.toml").symlink_to("../shared.toml")
    assert load_run(defined, "r").limits.max_attempts == 5
    key = source_key(str(defined), "r")  # what the hook rules are keyed by
    shared.write_text("[limits]\nmax_attempts = 9\n")
    assert load_run(defined, "r").limits.max_attempts == 9
    assert source_key(str(defined), "r") != key


@pytest.mark.parametrize("link", ["dangling", "loop"])
def test_a_config_link_that_cannot_be_read_gives_the_load_error(defined: Path, link: str) -> None:
    """config.toml a link that goes nowhere: loading says why, every time."""
    assert run_gitrun(defined, "status", "r").returncode == 0
    config = defined / ".gitrun/config.toml"
    config.symlink_to("nowhere.toml" if link == "dangling" else "config.toml")
    expected = _load_error(defined)
    for _ in range(2):
        proc = run_gitrun(defined, "status", "r")
        assert (proc.returncode, proc.stdout, proc.stderr.strip()) == (1, "", expected)


@pytest.mark.parametrize("where_file", [".gitrun", ".gitrun/runs", ".gitrun/runs/r"])
def test_a_file_where_a_definition_directory_belongs_is_one_sentence(
    defined: Path, where_file: str
) -> None:
    """``.gitrun`` (or a directory under it) replaced by a regular file: the
    key was computed with NotADirectoryError escaping, an internal error."""
    assert run_gitrun(defined, "status", "r").returncode == 0
    target = defined / where_file
    subprocess.run(["rm", "-rf", str(target)], check=True)
    target.write_text("not a directory\n")
    expected = _load_error(defined)
    proc = run_gitrun(defined, "status", "r")
    assert (proc.returncode, proc.stdout, proc.stderr.strip()) == (1, "", expected)


def test_a_run_id_with_a_trailing_newline_is_refused(defined: Path) -> None:
    proc = run_gitrun(defined, "resume", "r\n")
    assert proc.returncode == 1
    assert "is not a valid run id" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert not (defined / ".git/gitrun/r\n").exists()


# -- status where the repository is unusual -----------------------------------------


def test_status_is_the_definitions_everywhere(driven: Path) -> None:
    def same(repo: Path, *cli: str) -> None:
        for _ in range(2):
            proc = run_gitrun(repo, *cli, "status", "r", "--json")
            assert proc.returncode == 0, proc.stderr
            assert json.loads(proc.stdout) == _full(driven)

    same(driven)
    (driven / "sub").mkdir()
    same(driven / "sub")
    same(driven.parent, "-C", driven.name + "/sub")
    link = driven.parent / "linked"
    link.symlink_to(driven)
    same(link)
    tree = driven.parent / "tree"
    git(driven, "worktree", "add", "-q", "--detach", str(tree), "main")
    proc = run_gitrun(tree, "status", "r", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout) == json.loads(
        json.dumps(read_status(tree, "r", load_run(tree, "r"), landing=True).to_json())
    )
    git(driven, "branch", "-D", "gitrun/r")  # the branch deleted: pending again
    same(driven)


# -- start and status into closed pipes ---------------------------------------------


def _into_closed_pipe(
    cwd: Path, argv: list[str], stderr_too: bool = False
) -> subprocess.CompletedProcess[str]:
    """``argv`` (after the interpreter) with stdout, and stderr too when
    asked, the write end of a pipe nobody reads any more."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, *argv],
            cwd=cwd,
            stdout=write_end,
            stderr=write_end if stderr_too else subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)


def test_start_into_a_closed_pipe_keeps_the_runs_exit_code(git_repo: Path) -> None:
    """`gitrun start r --json | head -c0`: the run ends; its exit code, not
    an internal error and a crash log, is what the caller gets."""
    fake_worker_run(git_repo, "r", 2, {}, packet={"limits": {"canary": 0}})
    commit_all(git_repo, "define")
    proc = _into_closed_pipe(git_repo, ["-m", "gitrun", "start", "r", "--json"])
    assert proc.returncode == 0, proc.stderr
    assert "internal error" not in proc.stderr


def test_a_closed_stderr_does_not_stop_the_run(git_repo: Path) -> None:
    """`gitrun start r 2>&1 | head -1`: the driver's event lines meet a
    closed pipe; the run still ends with its work committed."""
    fake_worker_run(git_repo, "r", 2, {}, packet={"limits": {"canary": 0}})
    commit_all(git_repo, "define")
    proc = _into_closed_pipe(git_repo, ["-m", "gitrun", "start", "r"], stderr_too=True)
    assert proc.returncode == 0
    states = {tid: t["status"] for tid, t in _full(git_repo)["tasks"].items()}
    assert states == {"t01": "done", "t02": "done"}


def test_typer_status_into_a_closed_pipe_is_quiet(defined: Path) -> None:
    full = "import sys; from gitrun.cli.main import main; sys.exit(main(sys.argv[1:]))"
    proc = _into_closed_pipe(defined, ["-c", full, "status", "r"])
    assert (proc.returncode, proc.stderr) == (1, "")


# -- regular files -------------------------------------------------------------------


def test_a_socket_is_not_a_regular_file(defined: Path) -> None:
    """open() of a socket fails with ENXIO before any fstat: read_regular
    said nothing of what the path is, and loading said "cannot read it"."""
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(".gitrun/config.toml")  # relative: a socket path is short
        with pytest.raises(NotRegular) as caught:
            read_regular(".gitrun/config.toml")
        assert caught.value.kind == "a socket"
        proc = run_gitrun(defined, "status", "r")
        assert proc.returncode == 1
        assert "config.toml: is a socket" in proc.stderr, proc.stderr


# -- diff-tree against the two listings ----------------------------------------------


def test_new_files_counts_a_submodule_gitlink_as_ls_tree_does(git_repo: Path) -> None:
    """diff-tree honours ``submodule.<name>.ignore = all`` from .gitmodules
    (and diff.ignoreSubmodules); the two ls-tree listings it replaced do not."""
    base = gitdoor.git(git_repo, "rev-parse", "HEAD").decode().strip()
    inner = git_repo.parent / "inner"
    inner.mkdir()
    git(inner, "init", "-q")
    (inner / "a.txt").write_text("a\n")
    commit_all(inner, "inner")
    git(git_repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(inner), "mod")
    git(git_repo, "config", "-f", ".gitmodules", "submodule.mod.ignore", "all")
    (git_repo / "out").mkdir()
    (git_repo / "out" / "a b.json").write_text("{}")
    commit_all(git_repo, "tip")
    tip = gitdoor.git(git_repo, "rev-parse", "HEAD").decode().strip()
    old = {p: blob for p, (_, blob) in gitdoor.ls_tree(git_repo, tip, []).items()}
    for path, (_, blob) in gitdoor.ls_tree(git_repo, base, []).items():
        if old.get(path) == blob:
            del old[path]
    assert "mod" in old
    assert gitdoor.new_files(git_repo, base, tip, []) == set(old)
    assert gitdoor.new_files(git_repo, base, tip, ["mod", "out"]) == set(old) - {".gitmodules"}
