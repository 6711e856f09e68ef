"""git.py against real temporary repositories: what it writes, how it fails,
which names it handles, and that a process committing for hours keeps no
child processes or open files from it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from gitrun.errors import CommandError, GitrunError
from gitrun.store import git, refs
from tests.helpers import build_tree, commit_all, run_gitrun, write_run
from tests.helpers import git as run_git

ODD_NAMES = [
    '"quoted".json',  # git reads a stdin line starting with '"' as C-quoted
    "-n.json",
    "sp ace.json",
    "back\\slash.json",
    "[a].json",
    "*.json",
    ":(top)magic.json",
    "ünïcode.json",
    "out/[a].json",
    "out/a.json",
    "\udcffraw.json",  # a file name that is not UTF-8, as surrogateescape gives it
]


def _commit_files(repo: Path, paths: list[str], message: str = "files") -> str:
    """Commit ``paths`` (as on disk) on refs/heads/side with git.py's write path."""
    ids = git.hash_files(repo, paths)
    base = git.rev_parse(repo, "HEAD")
    entries = [("100644", sha, path) for sha, path in zip(ids, paths, strict=True)]
    tree = git.tree_with(repo, base, entries, repo / ".git" / "test-index")
    commit = git.commit_tree(repo, tree, [base] if base else [], message)
    assert refs.update_ref(repo, "refs/heads/side", commit, git.rev_parse(repo, "refs/heads/side"))
    return commit


def test_odd_file_names_are_committed_and_read_back_as_they_are(git_repo: Path) -> None:
    for name in ODD_NAMES:
        path = git_repo / os.fsencode(name).decode(errors="surrogateescape")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"content of {name!r}\n".encode(errors="surrogateescape"))
    commit = _commit_files(git_repo, ODD_NAMES)
    files = git.ls_tree(git_repo, commit)
    for name in ODD_NAMES:
        assert name in files, name
        blob = git.cat_blob(git_repo, files[name][1])
        assert blob == f"content of {name!r}\n".encode(errors="surrogateescape")
    # Nothing else came in under a name git made up from an odd one.
    assert set(files) == {"README.md", *ODD_NAMES}


def test_a_path_is_never_a_pattern(git_repo: Path) -> None:
    build_tree(git_repo, {"out/a.json": "a", "out/b.json": "b", "out/[a].json": "bracket"})
    commit = _commit_files(git_repo, ["out/a.json", "out/b.json", "out/[a].json"])
    assert set(git.ls_tree(git_repo, commit, ["out/[a].json"])) == {"out/[a].json"}
    assert git.ls_tree(git_repo, commit, ["out/*.json"]) == {}
    assert git.ls_tree(git_repo, commit, [":(glob)out/*"]) == {}


def test_a_failed_write_names_the_command_its_status_and_what_git_said(git_repo: Path) -> None:
    with pytest.raises(CommandError) as caught:
        git.hash_files(git_repo, ["no-such-file.json"])
    error = caught.value
    assert error.returncode == 128
    assert "hash-object" in error.argv
    assert "no-such-file.json" in error.output
    assert "could not open" in str(error) or "No such file" in str(error)
    assert "exited with status 128" in str(error)
    # The failure came through GitPython's command layer and was mapped.
    from git.exc import GitCommandError

    assert isinstance(error.__cause__, GitCommandError)


def test_git_that_cannot_start_is_named_with_the_fix(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import git as gitpython  # GitPython looks for git once, on import: do that first

    from gitrun.errors import GitUnavailable

    assert gitpython.__version__
    monkeypatch.setenv("PATH", str(git_repo / "no-bin"))
    for call in (lambda: git.hash_bytes(git_repo, b"x"), lambda: git.rev_parse(git_repo, "HEAD")):
        with pytest.raises(GitUnavailable, match=r"^git is not installed here .* put it on PATH"):
            call()


def test_update_ref_is_a_compare_and_swap(git_repo: Path) -> None:
    head = git.rev_parse(git_repo, "HEAD")
    assert head
    ref = "refs/heads/gitrun/r"
    assert refs.update_ref(git_repo, ref, head, None)
    assert not refs.update_ref(git_repo, ref, head, None)  # exists already
    build_tree(git_repo, {"x.txt": "x"})
    commit_all(git_repo, "second")
    second = git.rev_parse(git_repo, "HEAD")
    assert second
    assert not refs.update_ref(git_repo, ref, second, second)  # wrong old value
    assert git.rev_parse(git_repo, ref) == head
    assert refs.update_ref(git_repo, ref, second, head)
    assert git.rev_parse(git_repo, ref) == second


def test_commits_without_a_configured_identity_are_made_as_gitrun(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(key)
    monkeypatch.setenv("EMAIL", "")
    run_git(git_repo, "config", "user.useConfigOnly", "true")
    head = git.rev_parse(git_repo, "HEAD")
    assert head
    tree = run_git(git_repo, "rev-parse", "HEAD^{tree}").strip()
    commit = git.commit_tree(git_repo, tree, [head], "no identity\n")
    assert run_git(git_repo, "log", "-1", "--format=%an <%ae>", commit).strip() == (
        "gitrun <gitrun@localhost>"
    )


def test_inside_a_git_hook_writes_go_to_the_named_repository(
    tmp_path: Path, git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hook exports GIT_DIR and GIT_INDEX_FILE of the repository being
    committed to; GitPython passes the whole environment on, so git.py must
    not let them redirect its writes."""
    other = tmp_path / "other"
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other / ".git" / "index"))
    build_tree(git_repo, {"out/x.json": "{}"})
    commit = _commit_files(git_repo, ["out/x.json"])
    for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(key)
    assert run_git(git_repo, "rev-parse", "refs/heads/side").strip() == commit
    assert "out/x.json" in run_git(git_repo, "ls-tree", "-r", "--name-only", commit)
    listed = subprocess.run(
        ["git", "-C", str(other), "for-each-ref"], capture_output=True, text=True, check=True
    )
    assert listed.stdout == ""
    assert not (other / ".git" / "index").exists()


def test_a_name_git_refuses_is_an_error_and_nothing_is_committed(git_repo: Path) -> None:
    blob = git.hash_bytes(git_repo, b"x")
    with pytest.raises(GitrunError, match="would not record"):
        git.tree_with(git_repo, None, [("100644", blob, ".git/config")], git_repo / "idx")


def test_writes_that_fail_leave_no_process_behind(git_repo: Path) -> None:
    me = psutil.Process()
    before = {child.pid for child in me.children(recursive=True)}
    for _ in range(20):
        with pytest.raises(CommandError):
            git.write_git(git_repo, "cat-file", "-e", "0" * 40)
    assert {child.pid for child in me.children(recursive=True)} <= before


def _resources() -> tuple[int, int]:
    me = psutil.Process()
    return len(me.children(recursive=True)), me.num_fds()


@pytest.mark.soak
def test_two_thousand_commits_keep_no_process_or_file_open(git_repo: Path) -> None:
    """The driver commits for hours in one process, and GitPython is known to
    leak persistent cat-file processes and open handles when a Repo is kept.
    Each commit is commit-tree and the ref's compare-and-swap; every 20th one
    also writes a blob and a tree, the rest reuse the last tree."""
    index = git_repo / ".git" / "leak-index"
    ref = "refs/heads/gitrun/leak"
    tip: str | None = None
    tree = ""
    baseline = (-1, -1)
    for i in range(2020):
        if i % 20 == 0:
            blob = git.hash_bytes(git_repo, f"{i}\n".encode())
            tree = git.tree_with(git_repo, tip, [("100644", blob, f"out/{i}.txt")], index)
        new = git.commit_tree(git_repo, tree, [tip] if tip else [], f"commit {i}\n")
        assert refs.update_ref(git_repo, ref, new, tip)
        tip = new
        if i == 19:  # imports and first-use caches have settled
            assert "git.cmd" in sys.modules  # the writes really go through GitPython
            baseline = _resources()
    assert _resources() == baseline
    assert run_git(git_repo, "rev-list", "--count", ref).strip() == "2020"


def _imported_by(*argv: str, cwd: Path) -> set[str]:
    """Top-level names of the modules a fresh interpreter imports running ``argv``."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, cwd=cwd
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


GITPYTHON = {"git", "gitdb", "smmap"}


def test_the_import_probe_sees_gitpython(tmp_path: Path) -> None:
    assert _imported_by("-c", "import git", cwd=tmp_path) >= GITPYTHON


@pytest.mark.parametrize("command", [["--version"], ["--help"], ["status"]])
def test_read_only_commands_do_not_import_gitpython(git_repo: Path, command: list[str]) -> None:
    imported = _imported_by("-m", "gitrun", *command, cwd=git_repo)
    assert "gitrun" in imported
    assert not imported & GITPYTHON


def test_writes_prepared_in_the_background_import_gitpython_once(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from gitrun.store import git\n"
        "git.prepare_writes()\n"
        "git.prepare_writes()  # one import, however often it is asked\n"
        "thread = git._importing\n"
        "assert thread is not None and thread.daemon\n"
        "thread.join(60)\n"
        "assert 'git.cmd' in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_background_import_that_failed_is_reported_by_the_write(git_repo: Path) -> None:
    """Without git on PATH GitPython refuses to import: the background import
    swallows that, and the first write tries again and says what is wrong."""
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from gitrun.store import git\n"
        "from gitrun.errors import GitUnavailable\n"
        "git.prepare_writes()\n"
        "git._importing.join(60)\n"
        "assert 'git' not in sys.modules  # the package's import failed\n"
        "try:\n"
        "    git.hash_bytes(Path('.'), b'x')\n"
        "except GitUnavailable as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    raise SystemExit('no error')\n"
    )
    env = {**os.environ, "PATH": str(git_repo / "no-bin")}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=git_repo, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "git is not installed here (no `git` on PATH)" in proc.stdout


def test_new_files_is_the_difference_of_the_two_listings(git_repo: Path) -> None:
    """new_files (one diff-tree) against what listing both trees says, with
    added, changed, unchanged, mode-only, deleted and type-changed files, and
    directory names that are patterns to git."""
    build_tree(
        git_repo,
        {
            "out/same.json": "{}",
            "out/changed.json": "1",
            "out/mode.sh": "echo",
            "out/gone.json": "x",
            "out/link": "target",
            "a[1]/x.json": "1",
            "a1/x.json": "1",
            "st*r/x.json": "1",
        },
    )
    commit_all(git_repo, "base")
    base = run_git(git_repo, "rev-parse", "HEAD").strip()
    build_tree(
        git_repo,
        {
            "out/changed.json": "2",
            "out/new.json": "{}",
            "a[1]/x.json": "2",
            "st*r/y.json": "1",
            "other/z.json": "1",
        },
    )
    (git_repo / "out/gone.json").unlink()
    (git_repo / "out/mode.sh").chmod(0o755)
    (git_repo / "out/link").unlink()
    (git_repo / "out/link").symlink_to("same.json")
    commit_all(git_repo, "tip")
    tip = run_git(git_repo, "rev-parse", "HEAD").strip()

    def reference(paths: list[str] | None) -> set[str]:
        old = {p: blob for p, (_, blob) in git.ls_tree(git_repo, base, paths).items()}
        return {
            p for p, (_, blob) in git.ls_tree(git_repo, tip, paths).items() if old.get(p) != blob
        }

    for paths in (None, ["out"], ["a[1]"], ["st*r"], ["a[1]", "other"], ["nothing"]):
        assert git.new_files(git_repo, base, tip, paths) == reference(paths), paths
    assert git.new_files(git_repo, base, tip, ["out"]) == {
        "out/changed.json",
        "out/new.json",
        "out/link",
    }
    assert git.new_files(git_repo, base, tip, ["a[1]"]) == {"a[1]/x.json"}


def test_a_repository_whose_path_holds_a_newline_runs_and_lands(tmp_path: Path) -> None:
    """start, status, retry, resume and land as real processes in a repository at
    ``.../re<newline>po<newline>``: every path git answers is read whole
    (a newline or a trailing one is part of it), the landed outputs are
    committed with a clean index and work tree, and nothing is written
    beside the repository."""
    parent = tmp_path / "parent"
    repo = parent / "re\npo\n"
    repo.mkdir(parents=True)
    run_git(repo, "init", "-q")
    # Written only once $GO is set: the first start halts, resume finishes.
    worker = '[ -n "$GO" ] && echo "{}" > "$GITRUN_OUTPUTS"'
    tasks: list[dict[str, object]] = [
        {"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in (1, 2)
    ]
    write_run(repo, "r", tasks, {"executor": {"command": ["sh", "-c", worker]}})
    build_tree(repo, {"README.md": "# sample\n"})
    commit_all(repo, "define r")
    before = sorted(os.listdir(parent))

    started = run_gitrun(repo, "start", "r", "-q")
    assert started.returncode == 3, started.stdout + started.stderr
    status = run_gitrun(repo, "status", "r")
    assert status.returncode == 0, status.stdout + status.stderr
    assert run_gitrun(repo, "retry", "r", "t1").returncode == 0
    resumed = run_gitrun(repo, "resume", "r", "-q", env={"GO": "1"})
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    landed = run_gitrun(repo, "land", "r")
    assert landed.returncode == 0, landed.stdout + landed.stderr

    at_head = run_git(repo, "ls-tree", "-r", "--name-only", "-z", "HEAD", "out").split("\0")
    assert sorted(filter(None, at_head)) == ["out/t1.json", "out/t2.json"]
    assert run_git(repo, "status", "--porcelain", "-z", "--untracked-files=all") == ""
    assert sorted(os.listdir(parent)) == before


def test_a_run_branch_checked_out_where_the_path_holds_a_newline_names_it_whole(
    git_repo: Path, tmp_path: Path
) -> None:
    from gitrun.store.branches import run_branches

    linked = tmp_path / "linked\nwork tree\n"
    run_git(git_repo, "branch", "gitrun/r")
    run_git(git_repo, "branch", "gitrun/s")
    run_git(git_repo, "worktree", "add", "-q", str(linked), "gitrun/r")
    found = run_branches(git_repo)
    assert sorted(found) == ["r", "s"]
    assert found["r"].worktree == str(linked)
    assert found["s"].worktree is None


def test_stored_blob_ids_are_what_git_add_stores(git_repo: Path) -> None:
    """With core.autocrlf=true a CRLF file has the id of its LF blob; a
    path that is not a regular file (gone, a directory) is left out and the
    rest are still answered."""
    build_tree(git_repo, {"a.txt": b"one\r\ntwo\r\n", "c.txt": b"three\n", "d/e.txt": b"x"})
    run_git(git_repo, "config", "core.autocrlf", "true")
    found = git.stored_blob_ids(git_repo, ["a.txt", "gone.txt", "c.txt", "d", "d/e.txt"])
    assert set(found) == {"a.txt", "c.txt", "d/e.txt"}
    run_git(git_repo, "add", "a.txt", "c.txt", "d/e.txt")
    for path, blob in found.items():
        assert run_git(git_repo, "rev-parse", f":{path}").strip() == blob, path
