"""The ledger: chunk files read back in order, one writer, storage linear in its size."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from gitrun.commands.session import start_run
from gitrun.definition.load import load_run
from gitrun.definition.runfiles import definition_files
from gitrun.engine.committer import Committer
from gitrun.errors import GitrunError
from gitrun.store import ledger
from gitrun.store.ledger import LedgerWriter, chunk_name, chunk_names, read_ledger
from gitrun.store.local import LocalPaths
from tests.helpers import committed_ledger, fake_worker_run, git, ledger_records, write_run

quiet = lambda _line: None  # noqa: E731


def _record(n: int) -> dict[str, object]:
    return {"task": f"t{n:04d}", "attempt": 1, "outcome": "valid", "note": "x" * (n % 37)}


def stored_ledger_bytes(repo: Path, rev: str = "gitrun/r", run_id: str = "r") -> tuple[int, int]:
    """(bytes of every distinct ledger blob reachable from ``rev``, bytes of the
    ledger at ``rev``): what git keeps of the ledger against what it holds."""
    prefix = f".gitrun/runs/{run_id}/"

    def is_ledger(path: str) -> bool:
        return path.startswith(prefix) and ledger.is_ledger_name(path[len(prefix) :])

    listed = git(repo, "rev-list", "--objects", rev).splitlines()
    shas = sorted(
        {ln.split(" ", 1)[0] for ln in listed if " " in ln and is_ledger(ln.split(" ", 1)[1])}
    )
    # rev-list names each object once, by the first path it meets it at; the
    # tip's own ledger blobs are counted from ls-tree.
    tip = {
        ln.split()[2]: int(ln.split()[3])
        for ln in git(repo, "ls-tree", "-r", "-l", rev, "--", prefix).splitlines()
        if is_ledger(ln.split("\t", 1)[1])
    }
    batch = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "--batch-check=%(objectname) %(objectsize)"],
        input="".join(f"{s}\n" for s in set(shas) | set(tip)),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    stored = sum(int(ln.split()[1]) for ln in batch.splitlines())
    return stored, sum(tip.values())


# -- reading -----------------------------------------------------------------------------


def test_the_reader_returns_records_in_order_across_chunks(tmp_path: Path) -> None:
    """Chunk numbers order the ledger, not names: 99 before 100 (another
    directory) before 1000 and 1000000 (seven digits)."""
    numbers = [1000000, 2, 100, 1, 1000, 99, 101]
    for n in numbers:
        path = tmp_path / chunk_name(n)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_record(n)) + "\n" + json.dumps(_record(n + 1)) + "\n")
    # Not the ledger's: a chunk in the wrong directory, a stray name.
    (tmp_path / "ledger/0000/000100.jsonl").write_text(json.dumps(_record(7777)) + "\n")
    (tmp_path / "ledger/0000/notes.jsonl").write_text(json.dumps(_record(8888)) + "\n")
    got = [r["task"] for r in read_ledger(tmp_path)]
    want = [f"t{m:04d}" for n in sorted(numbers) for m in (n, n + 1)]
    assert got == want
    assert chunk_name(100) == "ledger/0001/000100.jsonl"
    assert chunk_names(tmp_path)[-1] == "ledger/10000/1000000.jsonl"


def test_a_line_cut_short_is_skipped_and_never_appended_to(tmp_path: Path) -> None:
    path = tmp_path / chunk_name(1)
    path.parent.mkdir(parents=True)
    cut = json.dumps(_record(2))[:20]
    path.write_text(json.dumps(_record(1)) + "\n" + cut)
    writer = LedgerWriter(tmp_path)
    writer.write(_record(3))
    writer.close()
    assert [r["task"] for r in read_ledger(tmp_path)] == ["t0001", "t0003"]
    # The next record went to a chunk of the writer's own: the cut line stays
    # as the crash left it, and does not swallow the new record.
    assert path.read_text().endswith(cut)
    assert chunk_names(tmp_path) == [chunk_name(1), chunk_name(2)]


def test_each_writer_starts_a_chunk_of_its_own(tmp_path: Path) -> None:
    first = LedgerWriter(tmp_path)
    second = LedgerWriter(tmp_path)
    first.write(_record(1))
    second.write(_record(2))
    first.write(_record(3))
    first.close()
    second.close()
    assert [r["task"] for r in ledger.read_lines(tmp_path / chunk_name(1))] == ["t0001", "t0003"]
    assert [r["task"] for r in ledger.read_lines(tmp_path / chunk_name(2))] == ["t0002"]
    LedgerWriter(tmp_path).close()  # a writer that writes nothing makes no chunk
    assert chunk_names(tmp_path) == [chunk_name(1), chunk_name(2)]


def test_a_chunk_is_left_once_its_committed_copies_outweigh_it(tmp_path: Path) -> None:
    """Every copy a commit took of a chunk is paid for by what the chunk holds
    in the end: the copies of each chunk add up to at most twice its size.
    Random bursts of records between random commits."""
    rng = random.Random(10)
    writer = LedgerWriter(tmp_path)
    copies: dict[str, list[int]] = {}  # chunk -> sizes of the distinct copies taken
    n = 0
    for _ in range(600):
        for _ in range(rng.choice([0, 1, 1, 1, 2, 5, 40])):
            n += 1
            writer.write(_record(n))
        with writer.held_for_commit():
            for name in chunk_names(tmp_path):
                size = (tmp_path / name).stat().st_size
                if not copies.get(name) or copies[name][-1] != size:
                    copies.setdefault(name, []).append(size)
    writer.close()
    assert [r["task"] for r in read_ledger(tmp_path)] == [f"t{i:04d}" for i in range(1, n + 1)]
    for name, sizes in copies.items():
        final = (tmp_path / name).stat().st_size
        assert sum(sizes) <= 2 * final, (name, sizes)
    assert len(copies) < 600 / 2  # chunks are shared by commits, not one each


# -- storage on the branch -----------------------------------------------------------------


def test_a_run_of_many_commits_stores_its_ledger_at_most_twice(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One task at a time, each landing in its own commit: git must keep at most
    twice the final ledger (one ledger file committed whole would keep one copy
    per commit, about commits/2 times the final size here)."""
    from gitrun.engine import commitqueue, committer

    # Each landing is committed before the driver goes on, so the tasks share
    # no commit however slow a loaded machine makes git (batched by timing,
    # they shared so many that too few commits were left to measure).
    put = commitqueue.CommitQueue.put

    def put_then_commit(queue: commitqueue.CommitQueue, landing: committer.Landing) -> None:
        put(queue, landing)
        queue.flush()

    monkeypatch.setattr(commitqueue.CommitQueue, "put", put_then_commit)
    fake_worker_run(git_repo, "r", 40, {}, {"limits": {"concurrency": 1, "canary": 1}})
    assert start_run(git_repo, "r", quiet).exit_code == 0
    commits = int(git(git_repo, "rev-list", "--count", "HEAD..gitrun/r"))
    assert commits >= 15, "the tasks shared too few commits to measure anything"
    stored, final = stored_ledger_bytes(git_repo)
    assert len(committed_ledger(git_repo)) == 1 + 40  # the round's start, the attempts
    assert final == sum(
        len(json.dumps(r, separators=(",", ":"))) + 1 for r in ledger_records(git_repo)
    )
    assert stored <= 2 * final, (
        f"{stored} bytes stored for a {final}-byte ledger in {commits} commits"
    )


def test_the_committer_keeps_the_bound_over_many_commits(git_repo: Path) -> None:
    """The writer and git together, without workers: 120 commits of bursts."""
    rng = random.Random(4)
    run_dir = write_run(git_repo, "r", [{"id": "t1", "outputs": ["a"]}])
    run = load_run(git_repo, "r")
    local = LocalPaths.of(git_repo, "r")
    committer = Committer(git_repo, "r", local)
    head = git(git_repo, "rev-parse", "HEAD").strip()
    committer.start_branch(head, definition_files(run), "start\n")
    writer = LedgerWriter(run_dir)
    n = 0
    read: list[int] = []  # ledger files each commit read and hashed
    for _ in range(120):
        for _ in range(rng.choice([1, 1, 2, 3, 9])):
            n += 1
            writer.write(_record(n))
        files = definition_files(run, writer)
        read.append(sum(1 for path in files if "/ledger/" in path))
        committer.commit([], files, "ledger\n")
    writer.close()
    # Chunks the branch holds as they are stay out of a commit: it takes the
    # chunk being written, and the one just left when the writer moved on.
    assert max(read) <= 2 and len(chunk_names(run_dir)) > 10, (read, chunk_names(run_dir))
    stored, final = stored_ledger_bytes(git_repo)
    assert [r["task"] for r in committed_ledger(git_repo)] == [f"t{i:04d}" for i in range(1, n + 1)]
    assert stored <= 2 * final, (stored, final)


# -- resume --------------------------------------------------------------------------------


def test_a_fresh_clone_gets_every_chunk_back_byte_for_byte(git_repo: Path, tmp_path: Path) -> None:
    fake_worker_run(git_repo, "r", 4, {"tasks": {"t02": "nowrite_then_write"}})
    assert start_run(git_repo, "r", quiet).exit_code == 0
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(git_repo), str(clone))
    git(clone, "branch", "gitrun/r", "origin/gitrun/r")
    assert not (clone / ".gitrun/runs/r").exists()
    from gitrun.commands.session import bring_definition

    bring_definition(clone, "r", quiet)
    names = chunk_names(clone / ".gitrun/runs/r")
    assert names and names == chunk_names(git_repo / ".gitrun/runs/r")
    for name in names:
        committed = git(git_repo, "show", f"gitrun/r:.gitrun/runs/r/{name}")
        assert (clone / ".gitrun/runs/r" / name).read_text() == committed
    assert ledger_records(clone) == ledger_records(git_repo)


def test_starting_over_moves_the_old_chunks_aside(git_repo: Path) -> None:
    fake_worker_run(git_repo, "r", 2, {})
    assert start_run(git_repo, "r", quiet).exit_code == 0
    before = ledger_records(git_repo)
    git(git_repo, "update-ref", "-d", "refs/heads/gitrun/r")
    for path in (git_repo / "out").iterdir():
        path.unlink()
    assert start_run(git_repo, "r", quiet).exit_code == 0
    assert len(ledger_records(git_repo)) == len(before)  # this run's records only
    aside = [p for p in (git_repo / ".git/gitrun/r").iterdir() if p.name.startswith("ledger.")]
    assert len(aside) == 1 and aside[0].is_dir()
    moved = [r for p in sorted(aside[0].rglob("*.jsonl")) for r in ledger.read_lines(p)]
    assert moved == before


def test_a_chunk_directory_that_is_a_link_or_a_file_is_one_sentence(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "ledger").symlink_to(elsewhere)
    with pytest.raises(GitrunError, match="is a symlink, where gitrun keeps the ledger's chunks"):
        read_ledger(run_dir)
    with pytest.raises(GitrunError, match="is a symlink"):
        LedgerWriter(run_dir).write(_record(1))
    (run_dir / "ledger").unlink()
    (run_dir / "ledger").write_text("")
    with pytest.raises(GitrunError, match="is a file, where gitrun keeps the ledger's chunks"):
        read_ledger(run_dir)
