"""Time check and status in a repository of 100,000 tracked files.

- *check, tracked inputs*: a run of N tasks (default 100,000), as `gitrun new
  --inputs` writes it, one per tracked input file;
- *check, landed*: the same after landing: every output a tracked file too
  (committed as landing leaves them; the run is not executed);
- *check, landed, ignored*: that, with a .gitignore naming the outputs'
  directory (tracked files git would otherwise ignore);
- *status, 60 runs, fresh clone*: `gitrun status` of 60 started one-task
  runs in a fresh clone of the repository that ran them, the runs'
  branches made local.

Rounds interleave the cases (and the two trees with ``--against DIR``, a
directory holding another `gitrun` package); the first round is not counted.
Targets: check <= 5 s, status <= 2 s.

    python bench/scale.py [--tasks 100000] [--runs 60] [--rounds 3] [--against DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Row, Sample, Table, git_env, gitrun_argv, make_repo, measure, median_of, walls

WORKER = 'echo {} > "$GITRUN_OUTPUTS"'


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, env=git_env())


def _gitrun(repo: Path, *args: str) -> None:
    proc = subprocess.run([*gitrun_argv(), *args], cwd=repo, env=git_env(), capture_output=True)
    if proc.returncode:
        raise SystemExit(f"gitrun {' '.join(args)} exited {proc.returncode}: {proc.stderr!r}")


def _files(root: Path, names: list[str], text: str) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _shell_worker(repo: Path, run: str) -> None:
    packet = repo / ".gitrun" / "runs" / run / "packet.toml"
    lines = packet.read_text().splitlines()
    lines = [f"shell = {WORKER!r}" if ln.startswith("shell = ") else ln for ln in lines]
    packet.write_text("\n".join(lines) + "\n")


def build_check(repo: Path, n: int, landed: bool, ignored: bool) -> None:
    _files(repo, [f"docs/ch{i:06d}.md" for i in range(n)], "chapter\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "inputs")
    # The shell preset: a check proves the executor's program runs, and the
    # bench machine need not have an agent CLI.
    _gitrun(
        repo,
        "new",
        "bench",
        "--inputs",
        "docs/*.md",
        "--output",
        "out/{stem}.json",
        "--preset",
        "shell",
    )
    _shell_worker(repo, "bench")
    if landed:
        _files(repo, [f"out/ch{i:06d}.json" for i in range(n)], "{}\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "the run" + (", landed" if landed else ""))
    if ignored:
        (repo / ".gitignore").write_text("out/\n")
        _git(repo, "add", ".gitignore")
        _git(repo, "commit", "-qm", "ignore the outputs")


def build_status(scratch: Path, runs: int) -> Path:
    origin = make_repo(scratch / "origin")
    _files(origin, [f"docs/c{i:03d}.md" for i in range(runs)], "chapter\n")
    ids = [f"r{i:03d}" for i in range(runs)]
    for i, run in enumerate(ids):
        _gitrun(
            origin,
            "new",
            run,
            "--inputs",
            f"docs/c{i:03d}.md",
            "--output",
            f"out/{run}.json",
            "--preset",
            "shell",
        )
        _shell_worker(origin, run)
    _git(origin, "add", "-A")
    _git(origin, "commit", "-qm", "the runs")
    for run in ids:
        _gitrun(origin, "start", run, "-q")
    clone = scratch / "clone"
    subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True, env=git_env())
    for run in ids:
        _git(clone, "branch", "-q", f"gitrun/{run}", f"origin/gitrun/{run}")
    return clone


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", metavar="DIR", help="also run gitrun from this source tree")
    args = parser.parse_args()
    trees = {"this tree": None}
    if args.against:
        trees["--against"] = str(Path(args.against).resolve())
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        cases: dict[str, tuple[Path, list[str], float]] = {}
        print("building the repositories (not timed)...", file=sys.stderr)
        for name, landed, ignored in [
            ("check, tracked inputs", False, False),
            ("check, landed", True, False),
            ("check, landed, outputs ignored", True, True),
        ]:
            repo = make_repo(scratch / name.replace(", ", "-").replace(" ", "-"))
            build_check(repo, args.tasks, landed, ignored)
            cases[f"{name}, {args.tasks:,} tasks"] = (repo, ["check", "bench"], 5.0)
        clone = build_status(scratch, args.runs)
        cases[f"status, {args.runs} runs, fresh clone"] = (clone, ["status"], 2.0)
        samples: dict[tuple[str, str], list[Sample]] = {}
        for number in range(args.rounds + 1):
            for case, (repo, argv, _target) in cases.items():
                for tree, path in trees.items():
                    env = git_env()
                    if path:
                        env["PYTHONPATH"] = os.pathsep.join(
                            filter(None, [path, env.get("PYTHONPATH")])
                        )
                    sample = measure([*gitrun_argv(), *argv], repo, env)
                    if number:  # the first round warms the caches; it is not counted
                        samples.setdefault((case, tree), []).append(sample)
    table = Table(f"check and status beside {args.tasks:,} tracked files")
    for case, (_repo, _argv, target) in cases.items():
        ours = samples[case, "this tree"]
        row = Row(case, f"{median_of(ours):.2f} s", target=f"<= {target:g} s")
        row.ok = median_of(ours) <= target
        if args.against:
            theirs = samples[case, "--against"]
            row.peer = f"--against: {median_of(theirs):.2f} s"
            row.ratio = f"{median_of(ours) / median_of(theirs):.2f}x"
            table.notes.append(f"  {case}, --against: {walls(theirs)} s")
        table.add(row, ours)
        table.notes.append(f"  {case}: {walls(ours)} s")
    table.print()
    return 0 if table.passed else 1


if __name__ == "__main__":
    sys.exit(main())
