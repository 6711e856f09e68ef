"""Committing to the run's branch with plumbing: exact bytes, compare-and-swap, recovery."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from gitrun.definition.outputs import OutputCheck
from gitrun.engine.committer import Committer, Landing, landing_message
from gitrun.errors import GitrunError
from gitrun.store.ledger import chunk_name
from gitrun.store.local import LocalPaths
from tests.helpers import build_tree, git

CHUNK = f".gitrun/runs/r/{chunk_name(1)}"  # the ledger's first chunk, as the writer names it


def _committer(repo: Path) -> Committer:
    committer = Committer(repo, "r", LocalPaths.of(repo, "r"))
    committer.start_branch(git(repo, "rev-parse", "HEAD").strip(), {}, "start\n")
    return committer


def _land(committer: Committer, task: str, data: bytes) -> str:
    landing = Landing(task, 1, [OutputCheck(f"out/{task}.json", "valid", data=data)])
    return committer.commit([landing], {}, landing_message("r", [landing]))


def test_the_validated_bytes_are_committed_not_what_is_on_disk_now(git_repo: Path) -> None:
    committer = _committer(git_repo)
    build_tree(git_repo, {"out/t1.json": '{"changed": "after validation"}\n'})
    tip = _land(committer, "t1", b'{"validated": true}\n')
    assert git(git_repo, "show", f"{tip}:out/t1.json") == '{"validated": true}\n'
    # The work tree and the index are untouched.
    assert git(git_repo, "status", "--porcelain", "--untracked-files=all") == "?? out/t1.json\n"


def test_a_deleted_branch_is_named_with_its_last_tip_and_restorable(git_repo: Path) -> None:
    committer = _committer(git_repo)
    tip = _land(committer, "t1", b"{}\n")
    git(git_repo, "update-ref", "-d", "refs/heads/gitrun/r")  # the reflog goes with it
    with pytest.raises(GitrunError) as caught:
        _land(committer, "t2", b"{}\n")
    message = str(caught.value)
    assert "reflog" not in message
    command = re.search(r"`(git branch gitrun/r [0-9a-f]{40})`", message)
    assert command is not None and tip in command[1]
    git(git_repo, *command[1].split()[1:])
    assert git(git_repo, "rev-parse", "gitrun/r").strip() == tip
    _land(committer, "t2", b"{}\n")  # the run goes on


def test_an_output_that_vanished_after_validation_is_committed_from_its_bytes(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One file of a batch gone from disk between validation and commit must
    not fail the commit: the validated bytes are what is committed anyway."""
    committer = _committer(git_repo)
    build_tree(git_repo, {"out/t1.json": '{"a": 1}\n', "out/t2.json": '{"b": 2}\n'})
    landings = [
        Landing("t1", 1, [OutputCheck("out/t1.json", "valid", data=b'{"a": 1}\n')]),
        Landing("t2", 1, [OutputCheck("out/t2.json", "valid", data=b'{"b": 2}\n')]),
    ]
    import gitrun.store.git as gitmod

    real = gitmod.hash_files

    def vanish_then_hash(repo: Path, paths: list[str]) -> list[str]:
        (git_repo / "out/t2.json").unlink()  # gone between the look and the hash
        return real(repo, paths)

    monkeypatch.setattr(gitmod, "hash_files", vanish_then_hash)
    tip = committer.commit(landings, {}, landing_message("r", landings))
    assert git(git_repo, "show", f"{tip}:out/t2.json") == '{"b": 2}\n'


def _git_shim(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``git`` first on PATH that logs its subcommand, then runs the real git."""
    import shutil

    real = shutil.which("git")
    assert real is not None
    shim = tmp / "shim"
    shim.mkdir()
    log = tmp / "git.log"
    script = shim / "git"
    script.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in -*|*=*|/*) ;; *) '
        f'echo "$a" >> "{log}"; break;; esac; done\n'
        f'exec "{real}" "$@"\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    return log


def test_a_commit_on_the_committers_own_last_one_runs_six_git_processes(
    git_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tasks that land one at a time pay for a whole commit each: no tip or
    tree lookups, no read-tree, no verifying ls-tree when git said nothing;
    one check-ignore asks whether a rule added meanwhile ignores an output."""
    committer = _committer(git_repo)
    _land(committer, "t1", b"{}\n")
    build_tree(git_repo, {"out/t2.json": '{"t": 2}\n'})
    log = _git_shim(tmp_path, monkeypatch)
    own = {CHUNK: b'{"n": 1}\n'}
    landing = Landing("t2", 1, [OutputCheck("out/t2.json", "valid", data=b'{"t": 2}\n')])
    tip = committer.commit([landing], own, landing_message("r", [landing]))
    ran = log.read_text().split()
    assert ran == [
        "check-ignore",
        "hash-object",
        "update-index",
        "write-tree",
        "commit-tree",
        "update-ref",
    ]
    files = git(git_repo, "ls-tree", "-r", "--name-only", tip).split()
    assert files == [CHUNK, "README.md", "out/t1.json", "out/t2.json"]
    # gitrun's own file unchanged since: not hashed again.
    log.unlink()
    _land(committer, "t3", b"{}\n")
    assert log.read_text().split().count("hash-object") == 1


def test_an_index_another_process_touched_is_read_again(git_repo: Path) -> None:
    """The private index is kept between commits only while nobody else
    wrote it: a committer that died half-way leaves entries that must never
    reach a commit."""
    import subprocess

    committer = _committer(git_repo)
    _land(committer, "t1", b"{}\n")
    index = LocalPaths.of(git_repo, "r").index
    junk = (
        subprocess.run(
            ["git", "hash-object", "-w", "--stdin"],
            input=b"junk\n",
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .strip()
    )
    subprocess.run(
        ["git", "update-index", "--add", "--cacheinfo", f"100644,{junk},out/junk.json"],
        env={**os.environ, "GIT_INDEX_FILE": str(index)},
        check=True,
    )
    tip = _land(committer, "t2", b"{}\n")
    files = git(git_repo, "ls-tree", "-r", "--name-only", tip).split()
    assert files == ["README.md", "out/t1.json", "out/t2.json"]


def test_a_branch_moved_by_someone_else_is_built_on_again(git_repo: Path) -> None:
    """The tip this committer remembers is only a first guess: the
    compare-and-swap fails when another committer moved the branch, and the
    commit is built again on what the branch holds."""
    first = _committer(git_repo)
    _land(first, "t1", b"{}\n")
    other = Committer(git_repo, "r", LocalPaths.of(git_repo, "r"))
    theirs = _land(other, "t2", b"{}\n")
    tip = _land(first, "t3", b"{}\n")
    assert git(git_repo, "rev-parse", f"{tip}^").strip() == theirs
    files = git(git_repo, "ls-tree", "-r", "--name-only", tip).split()
    assert files == ["README.md", "out/t1.json", "out/t2.json", "out/t3.json"]


def test_a_flush_commits_the_last_landings_and_the_ledger_together(git_repo: Path) -> None:
    """At shutdown the landings still waiting to coalesce and the ledger's
    last records go into one commit, not one each."""
    import threading

    from gitrun.engine.commitqueue import CommitQueue, Committed

    committer = _committer(git_repo)
    grows = iter(range(1000))  # the ledger grows between any two reads

    def own() -> dict[str, bytes]:
        return {CHUNK: f"{next(grows)}\n".encode()}

    made: list[Committed] = []
    first = threading.Event()

    def on_commit(committed: Committed) -> None:
        made.append(committed)
        first.set()

    queue = CommitQueue(committer, own, on_commit)
    try:
        queue.put(Landing("t1", 1, [OutputCheck("out/t1.json", "valid", data=b"{}\n")]))
        assert first.wait(30)
        # Within the coalescing window of the commit just made: it waits.
        queue.put(Landing("t2", 1, [OutputCheck("out/t2.json", "valid", data=b"{}\n")]))
        queue.flush()
    finally:
        queue.close()
    assert [c.tasks for c in made] == [["t1"], ["t2"]]
    tip = git(git_repo, "rev-parse", "gitrun/r").strip()
    assert tip == made[-1].commit
    ledger = git(git_repo, "show", f"{tip}:{CHUNK}")
    assert int(ledger) == next(grows) - 1  # the last read is in the last commit


def test_only_regular_files_reached_without_a_link_are_hashed_where_they_lie(
    git_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What stands behind a symlink now is not what was validated: never read
    through it (the validated bytes are committed instead), and one look per
    directory, not per file, decides."""
    committer = _committer(git_repo)
    data = {name: f'{{"{name}": 1}}\n'.encode() for name in "abcde"}
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in "abcde":
        (outside / f"{name}.json").write_bytes(data[name])
    build_tree(git_repo, {"out/a.json": data["a"], "out/e.json": data["e"]})
    os.symlink(outside, git_repo / "linked")  # b: through a linked directory
    os.symlink(outside / "c.json", git_repo / "out/c.json")  # c: a link itself
    # d: not on disk at all
    paths = ["out/a.json", "linked/b.json", "out/c.json", "out/d.json", "out/e.json"]
    landings = [
        Landing(path, 1, [OutputCheck(path, "valid", data=data[path[-6]])]) for path in paths
    ]
    import gitrun.store.git as gitmod

    offered: list[str] = []
    real = gitmod.hash_files

    def record(repo: Path, names: list[str]) -> list[str]:
        offered.extend(names)
        return real(repo, names)

    monkeypatch.setattr(gitmod, "hash_files", record)
    tip = committer.commit(landings, {}, landing_message("r", landings))
    assert offered == ["out/a.json", "out/e.json"]
    for path in paths:
        assert git(git_repo, "show", f"{tip}:{path}").encode() == data[path[-6]]


def test_a_burst_of_landings_wakes_the_committing_thread_once(git_repo: Path) -> None:
    """Landings put while a batch gathers join it without waking the thread,
    which would take the interpreter lock from the driver at every one; all
    of them are still committed, in one commit."""
    import threading

    from gitrun.engine.commitqueue import CommitQueue, Committed

    committer = _committer(git_repo)
    made: list[Committed] = []
    done = threading.Event()

    def on_commit(committed: Committed) -> None:
        made.append(committed)
        done.set()

    queue = CommitQueue(committer, dict, on_commit)
    wakes = 0
    real = queue._cond.notify_all

    def counted() -> None:
        nonlocal wakes
        wakes += 1
        real()

    try:
        with queue._cond:  # the thread cannot take the batch before it is whole
            queue._cond.notify_all = counted  # type: ignore[method-assign]
            for n in range(50):
                data = f'{{"n": {n}}}\n'.encode()
                queue.put(Landing(f"t{n}", 1, [OutputCheck(f"out/t{n}.json", "valid", data=data)]))
            queue._cond.notify_all = real  # type: ignore[method-assign]
        assert wakes == 1
        assert done.wait(30)
    finally:
        queue.close()
    assert [len(c.tasks) for c in made] == [50]


def test_a_big_batch_is_one_pack_of_the_validated_bytes(
    git_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hundred landings or more: their blobs go into one pack written by
    fast-import from the validated bytes (what lies on disk plays no part),
    in the same six processes a small commit takes."""
    from gitrun.engine.committer import PACK_AT

    committer = _committer(git_repo)
    n = PACK_AT + 20
    data = {f"out/t{i}.json": f'{{"t": {i}}}\n'.encode() for i in range(n)}
    build_tree(git_repo, {path: b'{"changed": "since"}\n' for path in list(data)[::2]})
    landings = [
        Landing(path[4:-5], 1, [OutputCheck(path, "valid", data=blob)])
        for path, blob in data.items()
    ]
    own = {CHUNK: b'{"n": 1}\n'}
    packs = set((git_repo / ".git/objects/pack").glob("*.pack"))
    log = _git_shim(tmp_path, monkeypatch)
    tip = committer.commit(landings, own, landing_message("r", landings))
    assert log.read_text().split() == [
        "check-ignore",
        "fast-import",
        "update-index",
        "write-tree",
        "commit-tree",
        "update-ref",
    ]
    assert len(set((git_repo / ".git/objects/pack").glob("*.pack")) - packs) == 1
    for path in (*list(data)[:3], list(data)[-1]):
        assert git(git_repo, "show", f"{tip}:{path}").encode() == data[path]
    assert git(git_repo, "show", f"{tip}:{CHUNK}") == '{"n": 1}\n'
    assert git(git_repo, "fsck", "--no-dangling").strip() == ""
