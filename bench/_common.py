"""Shared helpers for the benchmark scripts: temporary repositories and timing."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    env = git_env()
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    (path / "README.md").write_text("bench\n")
    subprocess.run(["git", "-C", str(path), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-qm", "init"], check=True, env=env)
    return path


def write_bench_run(
    repo: Path,
    tasks: list[dict[str, object]],
    executor: dict[str, object] | None = None,
    **limits: object,
) -> Path:
    """A run "bench" with these tasks; its worker is `true` unless given."""
    import tomli_w

    run_dir = repo / ".gitrun" / "runs" / "bench"
    run_dir.mkdir(parents=True)
    packet = {
        "run": {"id": "bench"},
        "limits": {"payload_budget": 100_000_000, **limits},
        "model": {"default": "bench-model"},
        "executor": executor or {"kind": "command", "command": ["true", "{pointer}"]},
    }
    (run_dir / "packet.toml").write_text(tomli_w.dumps(packet))
    (run_dir / "tasks.toml").write_text(tomli_w.dumps({"task": tasks}))
    return run_dir


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "GITRUN_"))}
    # An installed gitrun runs from cached bytecode (pip compiles it): let the
    # first, dropped round write it rather than compile every module every call.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(
        GIT_AUTHOR_NAME="bench",
        GIT_AUTHOR_EMAIL="bench@example.com",
        GIT_COMMITTER_NAME="bench",
        GIT_COMMITTER_EMAIL="bench@example.com",
    )
    return env


def gitrun_argv() -> list[str]:
    return [sys.executable, "-m", "gitrun"]


def median_seconds(action: Callable[[], object], repeat: int) -> tuple[float, list[float]]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), samples


def machine() -> str:
    return f"{os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.system()}"


# --- measuring a command, and printing one table per bench -------------------

# Run by a fresh interpreter that built nothing: it starts the command, waits
# for it, and reports its wall time and the peak resident memory of that one
# child (RUSAGE_CHILDREN of a process whose only child it is).
_MEASURE = """
import json, resource, subprocess, sys, time
argv, cwd = json.loads(sys.argv[1]), sys.argv[2]
start = time.perf_counter()
proc = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
wall = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
err = proc.stderr.decode(errors="replace")[-2000:]
print(json.dumps({"wall": wall, "peak": peak, "code": proc.returncode, "err": err}))
"""


@dataclass(frozen=True)
class Sample:
    wall: float  # seconds
    peak_mb: float  # peak resident memory of the command, MB
    load: float  # the 1-minute load average when it started


def measure(argv: list[str], cwd: Path, env: dict[str, str], ok: tuple[int, ...] = (0,)) -> Sample:
    """One run of ``argv`` in ``cwd``: wall time and peak memory, taken by a
    small helper process (so no memory of this one, which may hold a big
    state it built, is ever counted)."""
    load = os.getloadavg()[0]
    helper = [sys.executable, "-c", _MEASURE, json.dumps(argv), str(cwd)]
    out = subprocess.run(helper, env=env, capture_output=True, text=True, check=True).stdout
    result = json.loads(out)
    if result["code"] not in ok:
        raise SystemExit(f"{' '.join(argv)} exited {result['code']}: {result['err']}")
    return Sample(result["wall"], result["peak"], load)


def median_of(samples: list[Sample]) -> float:
    return statistics.median(s.wall for s in samples)


def peak_of(samples: list[Sample]) -> float:
    return max(s.peak_mb for s in samples)


def walls(samples: list[Sample]) -> str:
    return ", ".join(f"{s.wall:.2f}" for s in samples)


@dataclass
class Row:
    """One line of a bench's table; ``ok`` None when the row has no target."""

    case: str
    gitrun: str
    peer: str = "—"
    ratio: str = "—"
    target: str = "—"
    ok: bool | None = None


@dataclass
class Table:
    """One table per bench: gitrun, peer, ratio, target, PASS/MISS, and the
    load average while it ran."""

    title: str
    rows: list[Row] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, row: Row, *samples: list[Sample]) -> None:
        self.rows.append(row)
        for group in samples:
            self.loads += [s.load for s in group]

    @property
    def passed(self) -> bool:
        return all(row.ok is not False for row in self.rows)

    def print(self) -> None:
        header = ("case", "gitrun", "peer", "ratio", "target", "result")
        cells = [header] + [
            (
                r.case,
                r.gitrun,
                r.peer,
                r.ratio,
                r.target,
                "—" if r.ok is None else "PASS" if r.ok else "MISS",
            )
            for r in self.rows
        ]
        widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
        print(f"\n{self.title}")
        for n, line in enumerate(cells):
            print("  ".join(text.ljust(w) for text, w in zip(line, widths, strict=True)).rstrip())
            if n == 0:
                print("  ".join("-" * w for w in widths))
        if self.loads:
            mean = statistics.mean(self.loads)
            print(
                f"load average (1 min) during the runs: mean {mean:.2f}, max {max(self.loads):.2f}"
            )
        for note in self.notes:
            print(note)
        print(f"machine: {machine()}; {time.strftime('%Y-%m-%d')}")
