"""What the run branch stores of the ledger: 1,000 attempts over many commits.

The same attempt records are committed the way gitrun commits them, through
its committer, twice: as one ``ledger.jsonl`` committed whole every time
(before: the layout chunks replaced, which gitrun itself no longer reads) and
as chunks through the ledger writer (after). For each
commit pattern it prints the bytes of every distinct ledger blob reachable
from the branch against the final ledger's size (target: <= 2x), and the
bytes of the trees that hold the chunks (each commit rewrites the current
chunk directory and its parents).

    python bench/ledger_growth.py [--tasks 1000] [--per-commit 25,5,1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import git_env, machine, make_repo, write_bench_run


def record(i: int) -> dict[str, object]:
    """An attempt record of the size gitrun writes."""
    start = 1_800_000_000 + i
    return {
        "task": f"t{i:06d}",
        "attempt": 1,
        "stage": "work",
        "started": f"2027-01-15T08:00:{i % 60:02d}.123+00:00",
        "ended": f"2027-01-15T08:01:{i % 60:02d}.456+00:00",
        "duration": 63.333,
        "exit": 0,
        "signal": None,
        "timed_out": False,
        "outcome": "valid",
        "pid": start % 100_000,
    }


SINGLE = "ledger.jsonl"  # the "before" layout's one file


def _is_ledger(name: str) -> bool:
    from gitrun.store import ledger

    return name == SINGLE or ledger.is_ledger_name(name)


def stored(repo: Path, run_dir: str) -> tuple[int, int, int]:
    """(distinct ledger blob bytes, ledger bytes at the tip, ledger tree bytes)."""
    from gitrun.store import ledger

    prefix = run_dir + "/"
    out = subprocess.run(
        ["git", "-C", str(repo), "rev-list", "--objects", "refs/heads/gitrun/bench"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    blobs, trees = set(), set()
    for line in out.splitlines():
        sha, _, path = line.partition(" ")
        if not path.startswith(prefix):
            continue
        name = path[len(prefix) :]
        if _is_ledger(name):
            blobs.add(sha)
        elif name == ledger.CHUNK_DIR or name.startswith(ledger.CHUNK_DIR + "/"):
            trees.add(sha)
    tip = subprocess.run(
        ["git", "-C", str(repo), "ls-tree", "-r", "-l", "refs/heads/gitrun/bench", "--", prefix],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    final = 0
    for line in tip.splitlines():
        meta, path = line.split("\t", 1)
        if _is_ledger(path[len(prefix) :]):
            blobs.add(meta.split()[2])
            final += int(meta.split()[3])
    sizes = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "--batch-check=%(objectname) %(objectsize)"],
        input="".join(f"{s}\n" for s in blobs | trees),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    size = {ln.split()[0]: int(ln.split()[1]) for ln in sizes.splitlines()}
    return sum(size[s] for s in blobs), final, sum(size[s] for s in trees)


def one(root: Path, tasks: int, per_commit: int, chunked: bool) -> tuple[int, int, int, int, float]:
    from gitrun.definition.load import load_run
    from gitrun.definition.runfiles import definition_files
    from gitrun.engine.committer import Committer
    from gitrun.store.jsonlines import line_of
    from gitrun.store.ledger import LedgerWriter
    from gitrun.store.local import LocalPaths

    repo = make_repo(root / ("after" if chunked else "before"))
    run_dir = write_bench_run(repo, [{"id": "t1", "outputs": ["out/t1.json"]}])
    run = load_run(repo, "bench")
    committer = Committer(repo, "bench", LocalPaths.of(repo, "bench"))
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    committer.start_branch(head, definition_files(run), "start\n")
    writer = LedgerWriter(run_dir) if chunked else None
    single = run_dir / SINGLE
    commits = 0
    started = time.perf_counter()
    for first in range(0, tasks, per_commit):
        for i in range(first, min(first + per_commit, tasks)):
            if writer is not None:
                writer.write(record(i))
            else:
                with single.open("a") as handle:
                    handle.write(line_of(record(i)))
        files = definition_files(run, writer)
        if writer is None:
            files[f"{run.dir}/{SINGLE}"] = single.read_bytes()
        committer.commit([], files, "ledger\n")
        commits += 1
    elapsed = time.perf_counter() - started
    if writer is not None:
        writer.close()
    blobs, final, trees = stored(repo, run.dir)
    return commits, blobs, final, trees, elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--per-commit", default="25,5,1", help="attempts per commit, each tried")
    args = parser.parse_args()
    os.environ.update(git_env())
    print(f"# ledger storage on the run branch, {args.tasks} attempts ({machine()})")
    print(
        f"{'layout':<8} {'commits':>7} {'stored':>12} {'final':>10} {'ratio':>7} "
        f"{'chunk trees':>12} {'commit time':>12}"
    )
    for per in (int(p) for p in args.per_commit.split(",")):
        for chunked in (False, True):
            with tempfile.TemporaryDirectory(prefix="gitrun-bench-") as tmp:
                commits, blobs, final, trees, elapsed = one(Path(tmp), args.tasks, per, chunked)
            print(
                f"{'after' if chunked else 'before':<8} {commits:>7} {blobs:>12,} {final:>10,} "
                f"{blobs / final:>6.2f}x {trees:>12,} {elapsed / commits * 1000:>9.1f} ms"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
