"""Attacks on the run view, the quick start/resume path, the regular-file
reader and diff-tree (issue 14): each test is a way a careless user, a
concurrent edit or an odd file broke a promise. Status from the view must
equal status from the loaded definition; a definition that does not load
must give load_run's one-sentence error, never a stale answer or a traceback."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gitrun import git as gitdoor
from gitrun.errors import GitrunError
from gitrun.regular import NotRegular, read_regular
from gitrun.runs import load_run
from gitrun.state import load_view, read_status, where
from tests.helpers import commit_all, fake_worker_run, git, run_gitrun, write_run
from tests.test_runview import _by_definition as _full
from tests.test_runview import driven as driven  # the fixture


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


def _view_file(repo: Path) -> Path:
    return repo / ".git/gitrun/r/run-view.jsonl"


# -- what the key must cover ---------------------------------------------------------


def test_a_linked_config_is_keyed_by_what_it_points_to(defined: Path) -> None:
    shared = defined / "shared.toml"
    shared.write_text("[limits]\nmax_attempts = 5\n")
    (defined / ".gitrun/config.toml").symlink_to("../shared.toml")
    assert load_view(where(defined), "r").limits.max_attempts == 5  # loaded, view written
    shared.write_text("[limits]\nmax_attempts = 9\n")
    assert load_run(defined, "r").limits.max_attempts == 9
    assert load_view(where(defined), "r").limits.max_attempts == 9


@pytest.mark.parametrize("link", ["dangling", "loop"])
def test_a_config_link_that_cannot_be_read_gives_the_load_error(defined: Path, link: str) -> None:
    """A view written with no config at all must not answer once config.toml
    is a link that goes nowhere: loading says why, every time."""
    assert run_gitrun(defined, "status", "r").returncode == 0  # the view is written
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


# -- edits while a definition is read ------------------------------------------------


def test_an_edit_undone_around_the_load_is_not_cached(
    defined: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files are edited and put back while ``status`` loads them (a
    checkout of another branch and back): what was read is the edit, so it
    must not be cached under the key of the files as they are again."""
    from gitrun import runs

    packet = defined / ".gitrun/runs/r/packet.toml"
    original = packet.read_text()
    real = runs.load_run

    def load_during_an_edit(*args: Any, **kwargs: Any) -> Any:
        packet.write_text(original + "\n[limits]\nmax_attempts = 7\n")
        try:
            return real(*args, **kwargs)
        finally:
            packet.write_text(original)

    with monkeypatch.context() as patched:  # not undo(): that drops conftest's env too
        patched.setattr(runs, "load_run", load_during_an_edit)
        assert load_view(where(defined), "r").limits.max_attempts == 7
    assert load_view(where(defined), "r").limits.max_attempts == 3


class _Swapped(Exception):
    """The packet was never read through the wrapped reader."""


def test_an_edit_undone_while_the_packet_is_read_is_not_cached(
    defined: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gitrun import runs

    packet = defined / ".gitrun/runs/r/packet.toml"
    original = packet.read_text()
    real = runs.read_toml_text
    swapped = []

    def read_during_an_edit(path: Path, shown: str | None = None) -> Any:
        if Path(path).name != "packet.toml":
            return real(path, shown)
        packet.write_text(original + "\n[limits]\nmax_attempts = 7\n")
        swapped.append(path)
        try:
            return real(path, shown)
        finally:
            packet.write_text(original)

    with monkeypatch.context() as patched:
        patched.setattr(runs, "read_toml_text", read_during_an_edit)
        assert load_view(where(defined), "r").limits.max_attempts == 7
    if not swapped:
        raise _Swapped("the packet is no longer read by runs.read_toml_text; update the test")
    assert load_view(where(defined), "r").limits.max_attempts == 3


# -- views damaged with their checksums right ---------------------------------------


@pytest.mark.parametrize("damage", ["max_attempts text", "halt junk", "max_cost text", "deep"])
def test_a_view_with_values_of_the_wrong_type_is_read_again(driven: Path, damage: str) -> None:
    assert run_gitrun(driven, "status", "r").returncode == 0
    view = _view_file(driven)
    head, _, rest = view.read_bytes().partition(b"\n")
    header = json.loads(head)
    if damage == "max_attempts text":
        header["limits"]["max_attempts"] = "2"
    elif damage == "halt junk":
        header["limits"]["halt"] = "junk"
    elif damage == "max_cost text":
        header["limits"]["max_cost_usd"] = "1"
    else:
        rest = b"[" * 100_000 + b"]" * 100_000 + b"\n# end of the run view\n"
        header["tasks_sha256"] = hashlib.sha256(rest.split(b"\n")[0]).hexdigest()
    view.write_bytes(json.dumps(header).encode() + b"\n" + rest)
    proc = run_gitrun(driven, "status", "r", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == _full(driven)


# -- the view against the definition where the repository is unusual ---------------


def test_status_from_the_view_is_the_definitions_everywhere(driven: Path) -> None:
    def same(repo: Path, *cli: str) -> None:
        for _ in range(2):  # the first may write the view, the second reads it
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
        json.dumps(read_status(tree, "r", load_run(tree, "r")).to_json())
    )
    git(driven, "branch", "-D", "gitrun/r")  # the branch deleted: pending again
    same(driven)


# -- the quick start/resume path and closed pipes -----------------------------------


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
    full = "import sys; from gitrun.cli import main; sys.exit(main(sys.argv[1:]))"
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
