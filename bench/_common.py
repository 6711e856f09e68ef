"""Shared helpers for the benchmark scripts: temporary repositories and timing."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
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
