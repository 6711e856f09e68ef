"""Dispatch against GNU parallel: throughput, fixed costs, width, and commits.

Four cases, each gitrun (every output validated and committed on the run
branch) against GNU parallel running the same shell commands with sh,
interleaved round by round so a burst of load elsewhere falls on both;
gitrun's load gate is set beyond reach, and the timed section is the command
alone (repositories are set up before it).

- throughput: 1,000 tasks writing a small JSON file at concurrency 4.
  Target: gitrun <= 0.6 x `parallel -j4 --joblog` wall time (xargs -P4 is
  shown for scale).
- fixed overhead: from the same runs, the wall time outside the task span
  (first start to last end, from gitrun's ledger and parallel's joblog):
  start-up, branch creation, shutdown. Target: <= 0.2 s. Shown for a
  start of a fresh definition (checked with pydantic before its first
  task) and for a start after `gitrun check` (as a lead checks a run before
  starting it; the start then makes the definition from what the check
  kept, without pydantic).
- width: 160 tasks of 0.2 s at concurrency 16; efficiency is the ideal wall
  time (tasks x 0.2 s / 16) over the real one. Target: >= parallel's.
  Shown again without the canary (limits.canary = 0), for scale: the
  canary runs one task alone first, a rule of the product that parallel
  does not have.
- one at a time: 20 tasks of 0.3 s at concurrency 1, so every task lands
  alone and gets a commit of its own (commits coalesce within 0.25 s): CPU
  per task of the whole process tree (20 tasks less 2 tasks, over 18), and
  git processes per commit, counted by a `git` on PATH that logs each call
  (the 2-second stray-write audit aside). Target: <= 6 git processes (one
  check-ignore for the batch, then the five that build and publish it).
- isolation (only when asked for): the throughput case with every attempt
  confined under bubblewrap (isolation = "sandbox"), in a scratch directory
  ("scratch") and neither ("none"), interleaved with parallel. Targets:
  confinement adds <= 20 ms to an attempt; confined, gitrun <= 0.6 x
  parallel's wall time. The scratch rows are shown for scale.
- phases (only when asked for): where the wall time of one 1,000-task
  `gitrun start` goes, from the parent's spawn to the process being gone,
  marked by wrapping gitrun's own functions in the child (medians). No peer.

One untimed run first writes the bytecode and warms the disk caches.
``--against DIR`` runs a second gitrun from the source tree DIR (another
checkout, e.g. ``git worktree add /tmp/before <commit>``) in the same rounds,
interleaved with the others, and adds its rows: before and after side by side.

    python bench/dispatch.py [--tasks 1000] [--repeat 5] [--case NAME ...] [--against DIR]

GNU parallel is optional: without it the peer columns stay empty (install it
with `apt-get install parallel` or `brew install parallel`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Row, Table, git_env, gitrun_argv, make_repo, write_bench_run

WRITE = 'printf \'{"task": "%s"}\\n\' "$GITRUN_TASK" > "$GITRUN_OUTPUTS"'
TARGET_RATIO = 0.6
TARGET_OVERHEAD = 0.2
TARGET_CONFINED_MS = 20.0  # what confinement may add to one attempt
# check-ignore, hash-object, update-index, write-tree, commit-tree, update-ref
TARGET_GIT_PER_COMMIT = 6
WIDE_TASKS, WIDE_J, WIDE_SLEEP = 160, 16, 0.2
AGAINST = "before"  # the tool name of the gitrun run from the --against tree
NO_CANARY = "gitrun, no canary"
CHECKED = "gitrun, after check"
AGAINST_CHECKED = "before, after check"  # the throughput case again, the run checked before its start  # the width case again with limits.canary = 0
ALONE_TASKS, ALONE_SLEEP, FEW = 20, 0.3, 2


def shell_command(task: str, sleep: float = 0.0) -> str:
    pause = f"sleep {sleep}; " if sleep else ""
    return f'{pause}printf \'{{"task": "%s"}}\\n\' {task} > out/{task}.json'


def task_ids(n: int) -> list[str]:
    return [f"t{i:04d}" for i in range(n)]


def setup_gitrun(
    root: Path,
    n: int,
    concurrency: int = 4,
    sleep: float = 0.0,
    isolation: str = "auto",
    **limits: object,
) -> Path:
    """A repository with a run "bench" of ``n`` tasks, each writing its JSON
    output (after ``sleep`` seconds), confined as ``isolation`` says, with
    these ``limits`` besides; bench/compare.py uses it too."""
    repo = make_repo(root)
    script = f"sleep {sleep}; {WRITE}" if sleep else WRITE
    tasks: list[dict[str, object]] = [
        {"id": tid, "outputs": [f"out/{tid}.json"]} for tid in task_ids(n)
    ]
    executor: dict[str, object] = {
        "kind": "command",
        "command": ["sh", "-c", script],
        "isolation": isolation,
    }
    write_bench_run(repo, tasks, executor, concurrency=concurrency, **limits)
    return repo


@dataclass(frozen=True)
class Took:
    wall: float  # seconds, the command alone
    overhead: float  # seconds outside the task span
    cpu: float  # user + system seconds of the whole process tree
    load: float  # 1-minute load average when it started
    git_calls: int = 0  # after the first landing's commit, up to the last commit
    commits: int = 0  # the commits they made

    @property
    def calls_per_commit(self) -> float:
        return self.git_calls / self.commits if self.commits else float("nan")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


class Bench:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.count = 0
        self.gitrun_env = {**git_env(), "GITRUN_MAX_LOAD": "1000000"}
        self.sh_env = {**os.environ, "SHELL": "/bin/sh"}
        self.shim = self._git_shim()

    def fresh(self, name: str) -> Path:
        self.count += 1
        return self.tmp / f"{name}{self.count}"

    def _git_shim(self) -> Path:
        real = shutil.which("git")
        assert real is not None
        shim = self.tmp / "shim"
        shim.mkdir()
        script = shim / "git"
        script.write_text(f'#!/bin/sh\necho "$*" >> "$BENCH_GIT_LOG"\nexec "{real}" "$@"\n')
        script.chmod(0o755)
        return shim

    def gitrun(
        self,
        n: int,
        concurrency: int,
        sleep: float = 0.0,
        count_git: bool = False,
        tree: str | None = None,
        checked: bool = False,
        isolation: str = "auto",
        **limits: object,
    ) -> Took:
        """``gitrun start`` of a fresh run; ``tree``: run gitrun from that source
        tree; ``checked``: after a ``gitrun check`` of the run (untimed), as a
        lead checks a run before starting it."""
        repo = setup_gitrun(self.fresh("g"), n, concurrency, sleep, isolation, **limits)
        env = dict(self.gitrun_env)
        if tree is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [tree, env.get("PYTHONPATH")]))
        if checked:
            subprocess.run(
                [*gitrun_argv(), "check", "bench"],
                cwd=repo,
                env=env,
                check=True,
                capture_output=True,
            )
        log = repo.parent / f"{repo.name}.git.log"
        if count_git:
            env["PATH"] = f"{self.shim}{os.pathsep}{env['PATH']}"
            env["BENCH_GIT_LOG"] = str(log)
        load = os.getloadavg()[0]
        cpu, began, start = _cpu(), time.time(), time.perf_counter()
        proc = subprocess.run(
            [*gitrun_argv(), "start", "bench", "--quiet"], cwd=repo, capture_output=True, env=env
        )
        wall, ended, cpu = time.perf_counter() - start, time.time(), _cpu() - cpu
        if proc.returncode != 0:
            raise SystemExit(f"gitrun failed: {proc.stderr.decode()[-2000:]}")
        committed = subprocess.run(
            ["git", "-C", str(repo), "ls-tree", "-r", "--name-only", "gitrun/bench", "out/"],
            capture_output=True,
            text=True,
        ).stdout.count("\n")
        if committed != n:
            raise SystemExit(f"gitrun committed {committed} of {n} outputs")
        spans = _task_spans(repo)
        overhead = (min(s for s, _ in spans) - began) + (ended - max(e for _, e in spans))
        calls = commits = 0
        if count_git:
            # From the first landing's commit to the last commit: the git
            # processes each landing costs (its commit, and what else the
            # driver asks git meanwhile), apart from start-up and shutdown.
            # The stray-write audit's `git status` runs on a 2 s timer, not
            # per commit: it is left out.
            lines = log.read_text().splitlines()
            publishes = [i for i, line in enumerate(lines) if " update-ref " in f" {line} "]
            between = lines[publishes[1] + 1 : publishes[-1] + 1]
            commits = len(publishes) - 2
            calls = sum(1 for line in between if " status " not in f" {line} ")
        return Took(wall, overhead, cpu, load, calls, commits)

    def parallel(self, n: int, jobs: int, sleep: float = 0.0) -> Took:
        where = self.fresh("p")
        (where / "out").mkdir(parents=True)
        commands = "".join(shell_command(tid, sleep) + "\n" for tid in task_ids(n))
        joblog = where / "joblog"
        load = os.getloadavg()[0]
        cpu, began, start = _cpu(), time.time(), time.perf_counter()
        subprocess.run(
            ["parallel", f"-j{jobs}", "--joblog", str(joblog)],
            input=commands.encode(),
            cwd=where,
            env=self.sh_env,
            check=True,
            capture_output=True,
        )
        wall, ended, cpu = time.perf_counter() - start, time.time(), _cpu() - cpu
        spans = []
        for line in joblog.read_text().splitlines()[1:]:
            fields = line.split("\t")
            spans.append((float(fields[2]), float(fields[2]) + float(fields[3])))
        overhead = (min(s for s, _ in spans) - began) + (ended - max(e for _, e in spans))
        return Took(wall, overhead, cpu, load)

    def xargs(self, n: int) -> Took:
        where = self.fresh("x")
        (where / "out").mkdir(parents=True)
        commands = "".join(shell_command(tid) + "\n" for tid in task_ids(n))
        load = os.getloadavg()[0]
        cpu, start = _cpu(), time.perf_counter()
        subprocess.run(
            ["xargs", "-d", "\n", "-P4", "-n1", "sh", "-c"],
            input=commands.encode(),
            cwd=where,
            check=True,
            capture_output=True,
        )
        return Took(time.perf_counter() - start, 0.0, _cpu() - cpu, load)


# Run in the child instead of `python -m gitrun`: wraps gitrun's functions by
# name (a name that is gone is skipped) and prints, as one JSON line on
# stderr, when the first call of each began and the last one ended. Wrapping
# imports the modules first, so their import is a phase of its own here.
_PHASES = """
import atexit, functools, importlib, json, sys, time
up = time.time()
marks = {}
def wrap(target):
    module, _, qual = target.partition(":")
    try:
        owner = importlib.import_module(module)
        *path, name = qual.split(".")
        for part in path:
            owner = getattr(owner, part)
        fn = getattr(owner, name)
    except (ImportError, AttributeError):
        return
    @functools.wraps(fn)
    def timed(*args, **kwargs):
        began = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            mark = marks.setdefault(target, [began, 0.0])
            mark[1] = time.time()
    setattr(owner, name, timed)
for target in sys.argv[1:]:
    wrap(target)
imported = time.time()
atexit.register(lambda: sys.stderr.write(
    "PHASES " + json.dumps({"up": up, "imported": imported, "marks": marks, "exit": time.time()})
    + chr(10)))
sys.argv = ["gitrun", "start", "bench", "--quiet"]
import gitrun.cli.entry
entered = time.time()
marks["main"] = [entered, entered]
raise SystemExit(gitrun.cli.entry.main())  # as gitrun.cli.entry.run ends
"""
# The functions marked, in order (module:qualified name).
_MARKED = [
    "gitrun.commands.session:start_run",
    "gitrun.commands.session:_create_branch",
    "gitrun.commands.session:check_run",
    "gitrun.engine.committer:Committer.start_branch",
    "gitrun.guard.rules:refresh",
    "gitrun.engine.driver:Driver.__init__",
    "gitrun.engine.driver:Driver.drive",
    "gitrun.engine.launch:Launcher.kill_leftovers",
    "gitrun.engine.commitqueue:CommitQueue.flush",
    "gitrun.engine.driver:outcome_of",
    "gitrun.commands.summary:format_summary",
]


def phases(bench: Bench, n: int, repeat: int, checked: bool) -> list[tuple[str, float]]:
    """Median seconds of each phase of a `gitrun start` of ``n`` tasks
    (``checked``: after a `gitrun check` of the run)."""
    rows: dict[str, list[float]] = {}
    for _ in range(repeat):
        repo = setup_gitrun(bench.fresh("f"), n, 4)
        if checked:
            subprocess.run(
                [*gitrun_argv(), "check", "bench"],
                cwd=repo,
                env=bench.gitrun_env,
                check=True,
                capture_output=True,
            )
        spawned = time.time()
        proc = subprocess.run(
            [sys.executable, "-c", _PHASES, *_MARKED],
            cwd=repo,
            capture_output=True,
            env=bench.gitrun_env,
        )
        gone = time.time()
        said = proc.stderr.decode(errors="replace")
        line = next((x for x in said.splitlines() if x.startswith("PHASES ")), None)
        if proc.returncode != 0 or line is None:
            raise SystemExit(f"gitrun failed: {said[-2000:]}")
        got = json.loads(line.removeprefix("PHASES "))
        marks: dict[str, list[float]] = got["marks"]
        spans = _task_spans(repo)
        first, last = min(s for s, _ in spans), max(e for _, e in spans)

        def at(
            target: str, end: bool = False, marks: dict[str, list[float]] = marks
        ) -> float | None:
            mark = marks.get(target)
            return None if mark is None else mark[1 if end else 0]

        points = [
            ("interpreter start", spawned, got["up"]),
            ("import the core (session, driver, ...)", got["up"], got["imported"]),
            ("command line: parse, find the repository", at("main"), at(_MARKED[0])),
            ("load the run, take the lock", at(_MARKED[0]), at(_MARKED[1])),
            ("check (ownership proof, dirty paths)", at(_MARKED[2]), at(_MARKED[2], True)),
            ("branch: lookups, first commit", at(_MARKED[2], True), at(_MARKED[1], True)),
            ("hook rules", at(_MARKED[4]), at(_MARKED[4], True)),
            ("driver set-up, to the first start", at(_MARKED[4], True), first),
            ("the fan-out: first start to last end", first, last),
            ("last end to the loop's end", last, at(_MARKED[7])),
            ("leftovers, final commit", at(_MARKED[7]), at(_MARKED[8], True)),
            ("status for the summary", at(_MARKED[8], True), at(_MARKED[9], True)),
            ("summary, CLI exit, interpreter exit", at(_MARKED[9], True), gone),
        ]
        for name, a, b in points:
            if a is not None and b is not None:
                rows.setdefault(name, []).append(b - a)
    return [(name, statistics.median(v)) for name, v in rows.items()]


def _task_spans(repo: Path) -> list[tuple[float, float]]:
    """(started, ended) of every attempt in the run's ledger."""
    spans = []
    for chunk in sorted((repo / ".gitrun/runs/bench").rglob("*.jsonl")):
        for line in chunk.read_text().splitlines():
            record = json.loads(line)
            if "started" in record and "ended" in record:
                spans.append((_epoch(record["started"]), _epoch(record["ended"])))
    return spans


def interleaved(repeat: int, tools: dict[str, Callable[[], Took]]) -> dict[str, list[Took]]:
    """Each tool once per round, the order turning each round."""
    names = list(tools)
    samples: dict[str, list[Took]] = {name: [] for name in names}
    for round_ in range(repeat):
        turn = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in turn:
            samples[name].append(tools[name]())
    return samples


def med(samples: list[Took], what: Callable[[Took], float]) -> float:
    return statistics.median(what(s) for s in samples)


def record(table: Table, got: dict[str, list[Took]], label: str = "") -> None:
    """The load average of every sample; with ``label``, a note of each run's wall time."""
    if label:
        walls = "; ".join(f"{n} {'/'.join(f'{s.wall:.2f}' for s in got[n])}" for n in got)
        table.notes.append(f"{label} runs (s): {walls}")
    for samples in got.values():
        table.loads += [s.load for s in samples]


def isolation(bench: Bench, table: Table, n: int, repeat: int, has_parallel: bool) -> None:
    """Confinement's cost: ``n`` tasks at -j4, each attempt under bubblewrap
    and not, interleaved; what it adds to one attempt is the difference in
    the run's wall time (and CPU) over the tasks."""
    from gitrun.workers.sandbox import probe

    refusal = probe()
    if refusal is not None:
        table.notes.append(f"isolation: skipped, {refusal}")
        return
    tools: dict[str, Callable[[], Took]] = {
        "confined": lambda: bench.gitrun(n, 4, isolation="sandbox"),
        "scratch": lambda: bench.gitrun(n, 4, isolation="scratch"),
        "unconfined": lambda: bench.gitrun(n, 4, isolation="none"),
    }
    if has_parallel:
        tools["parallel"] = lambda: bench.parallel(n, 4)
    got = interleaved(repeat, tools)
    confined = med(got["confined"], lambda s: s.wall)
    unconfined = med(got["unconfined"], lambda s: s.wall)
    added = (confined - unconfined) / n * 1000
    table.rows.append(
        Row(
            f"{n} tasks, -j4: wall confined / unconfined (median s)",
            f"{confined:.2f}",
            f"{unconfined:.2f}",
            f"{confined / unconfined:.2f}",
        )
    )
    table.rows.append(
        Row(
            "confinement: wall added per attempt (ms)",
            f"{added:.1f}",
            target=f"<= {TARGET_CONFINED_MS}",
            ok=added <= TARGET_CONFINED_MS,
        )
    )
    cpu = (med(got["confined"], lambda s: s.cpu) - med(got["unconfined"], lambda s: s.cpu)) / n
    table.rows.append(Row("confinement: CPU added per attempt (ms)", f"{cpu * 1000:.1f}"))
    scratch = med(got["scratch"], lambda s: s.wall)
    table.rows.append(
        Row(
            f"{n} tasks, -j4: wall in scratch / unconfined (median s)",
            f"{scratch:.2f}",
            f"{unconfined:.2f}",
            f"{scratch / unconfined:.2f}",
        )
    )
    if has_parallel:
        theirs = med(got["parallel"], lambda s: s.wall)
        table.rows.append(
            Row(
                f"{n} tasks, -j4, confined: wall against parallel (median s)",
                f"{confined:.2f}",
                f"{theirs:.2f}",
                f"{confined / theirs:.2f}",
                f"<= {TARGET_RATIO}",
                confined / theirs <= TARGET_RATIO,
            )
        )
    record(table, got, "isolation")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--case",
        action="append",
        choices=["throughput", "width", "alone", "phases", "isolation"],
        default=[],
    )
    parser.add_argument("--against", metavar="DIR", help="also run gitrun from this source tree")
    args = parser.parse_args()
    against: str | None = str(Path(args.against).resolve()) if args.against else None
    cases = args.case or ["throughput", "width", "alone"]
    n = args.tasks
    has_parallel = shutil.which("parallel") is not None
    table = Table("dispatch: gitrun start (validated + committed) against GNU parallel")
    if not has_parallel:
        table.notes.append("GNU parallel is not installed: no peer (apt-get install parallel)")
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp))
        bench.gitrun(5, 4)  # untimed: writes the bytecode, warms the caches
        if against:
            bench.gitrun(5, 4, tree=against)
        if "isolation" in cases:
            isolation(bench, table, n, args.repeat, has_parallel)
        if "throughput" in cases:
            tools: dict[str, Callable[[], Took]] = {"gitrun": lambda: bench.gitrun(n, 4)}
            tools[CHECKED] = lambda: bench.gitrun(n, 4, checked=True)
            if against:
                tools[AGAINST] = lambda: bench.gitrun(n, 4, tree=against)
                tools[AGAINST_CHECKED] = lambda: bench.gitrun(n, 4, tree=against, checked=True)
            if has_parallel:
                tools["parallel"] = lambda: bench.parallel(n, 4)
            tools["xargs"] = lambda: bench.xargs(n)
            got = interleaved(args.repeat, tools)
            ours = med(got["gitrun"], lambda s: s.wall)
            xargs = med(got["xargs"], lambda s: s.wall)
            overhead = med(got["gitrun"], lambda s: s.overhead)
            if has_parallel:
                theirs = med(got["parallel"], lambda s: s.wall)
                table.rows.append(
                    Row(
                        f"{n} tasks, -j4: wall (median s)",
                        f"{ours:.2f}",
                        f"{theirs:.2f}",
                        f"{ours / theirs:.2f}",
                        f"<= {TARGET_RATIO}",
                        ours / theirs <= TARGET_RATIO,
                    )
                )
                peer_overhead = f"{med(got['parallel'], lambda s: s.overhead):.2f}"
            else:
                table.rows.append(Row(f"{n} tasks, -j4: wall (median s)", f"{ours:.2f}"))
                peer_overhead = "—"
            table.rows.append(
                Row(
                    f"{n} tasks, -j4: outside the task span (s)",
                    f"{overhead:.2f}",
                    peer_overhead,
                    target=f"<= {TARGET_OVERHEAD}",
                    ok=overhead <= TARGET_OVERHEAD,
                )
            )
            after_check = med(got[CHECKED], lambda s: s.overhead)
            table.rows.append(
                Row(
                    f"{n} tasks, -j4: outside the task span, after `gitrun check` (s)",
                    f"{after_check:.2f}",
                    peer_overhead,
                    target=f"<= {TARGET_OVERHEAD}",
                    ok=after_check <= TARGET_OVERHEAD,
                )
            )
            table.rows.append(
                Row(f"{n} tasks: xargs -P4 wall, for scale", f"{ours:.2f}", f"{xargs:.2f}")
            )
            if against:
                before = med(got[AGAINST], lambda s: s.wall)
                table.rows.append(
                    Row(
                        f"{n} tasks, -j4: wall, vs the --against tree",
                        f"{ours:.2f}",
                        f"{before:.2f}",
                        f"{ours / before:.2f}",
                    )
                )
                table.rows.append(
                    Row(
                        f"{n} tasks, -j4: outside the span, vs the --against tree",
                        f"{overhead:.2f}",
                        f"{med(got[AGAINST], lambda s: s.overhead):.2f}",
                    )
                )
                table.rows.append(
                    Row(
                        f"{n} tasks, -j4: outside the span after check, vs the --against tree",
                        f"{after_check:.2f}",
                        f"{med(got[AGAINST_CHECKED], lambda s: s.overhead):.2f}",
                    )
                )
                table.rows.append(
                    Row(
                        f"{n} tasks, -j4: CPU of the process tree, vs the --against tree (s)",
                        f"{med(got['gitrun'], lambda s: s.cpu):.2f}",
                        f"{med(got[AGAINST], lambda s: s.cpu):.2f}",
                    )
                )
            record(table, got, "throughput")
        if "width" in cases:
            ideal = WIDE_TASKS * WIDE_SLEEP / WIDE_J
            tools = {
                "gitrun": lambda: bench.gitrun(WIDE_TASKS, WIDE_J, WIDE_SLEEP),
                NO_CANARY: lambda: bench.gitrun(WIDE_TASKS, WIDE_J, WIDE_SLEEP, canary=0),
            }
            if against:
                tools[AGAINST] = lambda: bench.gitrun(WIDE_TASKS, WIDE_J, WIDE_SLEEP, tree=against)
            if has_parallel:
                tools["parallel"] = lambda: bench.parallel(WIDE_TASKS, WIDE_J, WIDE_SLEEP)
            got = interleaved(args.repeat, tools)
            ours = ideal / med(got["gitrun"], lambda s: s.wall)
            if against:
                before = ideal / med(got[AGAINST], lambda s: s.wall)
                table.rows.append(
                    Row(
                        f"{WIDE_TASKS} x {WIDE_SLEEP} s: efficiency, vs the --against tree",
                        f"{ours:.0%}",
                        f"{before:.0%}",
                    )
                )
            case = f"{WIDE_TASKS} x {WIDE_SLEEP} s, -j{WIDE_J}: efficiency"
            if has_parallel:
                theirs = ideal / med(got["parallel"], lambda s: s.wall)
                table.rows.append(
                    Row(
                        case,
                        f"{ours:.0%}",
                        f"{theirs:.0%}",
                        f"{ours / theirs:.2f}",
                        ">= 1 (parallel's)",
                        ours >= theirs,
                    )
                )
            else:
                table.rows.append(Row(case, f"{ours:.0%}"))
            # The canary (one task alone before the rest) is a rule of the
            # product, not a cost of dispatch: shown without it for scale.
            bare = ideal / med(got[NO_CANARY], lambda s: s.wall)
            if has_parallel:
                table.rows.append(
                    Row(f"{case}, limits.canary = 0 (for scale)", f"{bare:.0%}", f"{theirs:.0%}")
                )
            else:
                table.rows.append(Row(f"{case}, limits.canary = 0 (for scale)", f"{bare:.0%}"))
            record(table, got, "width")
        if "alone" in cases:
            repeat = max(1, min(args.repeat, 3))
            # CPU per task: the difference between ALONE_TASKS tasks and
            # FEW, so start-up and shutdown (counted above) cancel out.
            tools = {
                "gitrun": lambda: bench.gitrun(ALONE_TASKS, 1, ALONE_SLEEP, count_git=True),
                "gitrun few": lambda: bench.gitrun(FEW, 1, ALONE_SLEEP),
            }
            if has_parallel:
                tools["parallel"] = lambda: bench.parallel(ALONE_TASKS, 1, ALONE_SLEEP)
                tools["parallel few"] = lambda: bench.parallel(FEW, 1, ALONE_SLEEP)
            got = interleaved(repeat, tools)

            def per_task(name: str) -> float:
                many = med(got[name], lambda s: s.cpu)
                few = med(got[f"{name} few"], lambda s: s.cpu)
                return (many - few) / (ALONE_TASKS - FEW) * 1000

            ours = per_task("gitrun")
            case = f"{ALONE_TASKS} tasks landing one at a time: CPU per task (ms)"
            if has_parallel:
                theirs = per_task("parallel")
                table.rows.append(Row(case, f"{ours:.1f}", f"{theirs:.1f}", f"{ours / theirs:.1f}"))
            else:
                table.rows.append(Row(case, f"{ours:.1f}"))
            per_commit = med(got["gitrun"], lambda s: s.calls_per_commit)
            commits = med(got["gitrun"], lambda s: s.commits)
            table.rows.append(
                Row(
                    f"  git processes per commit, audit aside ({commits:.0f} commits)",
                    f"{per_commit:.1f}",
                    target=f"<= {TARGET_GIT_PER_COMMIT}",
                    ok=per_commit <= TARGET_GIT_PER_COMMIT,
                )
            )
            record(table, got)
        if "phases" in cases:
            load = os.getloadavg()[0]
            for checked in (False, True):
                when = "after check" if checked else "fresh"
                for name, seconds in phases(bench, n, args.repeat, checked):
                    table.rows.append(Row(f"phase ({when}): {name} (ms)", f"{seconds * 1000:.0f}"))
            table.loads.append(load)
    table.print()
    return 0 if table.passed else 1


if __name__ == "__main__":
    sys.exit(main())
