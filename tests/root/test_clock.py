"""Durations on the monotonic clock: a stepped wall clock moves no deadline.

A real child driver runs with its wall clock stepped an hour, forward or
back, while an attempt runs (tests/steppedclock: ``time.time`` jumps the
moment the worker says it started); its deadlines, kill grace, backoff and
waits are measured on the monotonic clock, which no step moves.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gitrun.definition.schema import Limits
from gitrun.engine.governor import Governor
from tests.helpers import commit_all, ledger_records, user_env, wait_until, write_run

SHIM = Path(__file__).parent.parent / "steppedclock"


def _stepped_driver(repo: Path, trigger: Path, by: float) -> subprocess.Popen[str]:
    """``gitrun start r`` as a real child whose wall clock steps ``by``
    seconds once ``trigger`` exists."""
    path = os.pathsep.join(p for p in (str(SHIM), os.environ.get("PYTHONPATH", "")) if p)
    env = {
        **user_env(),
        "PYTHONPATH": path,
        "STEPPED_CLOCK_AT": str(trigger),
        "STEPPED_CLOCK_BY": str(by),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "gitrun", "start", "r"],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )


def _finish(driver: subprocess.Popen[str], timeout: float) -> tuple[int | None, str]:
    """The driver's exit code and output; a driver still running after
    ``timeout`` seconds is stopped (its attempts with it) and gives None."""
    try:
        out, _ = driver.communicate(timeout=timeout)
        return driver.returncode, out
    except subprocess.TimeoutExpired:
        driver.send_signal(signal.SIGTERM)
        out, _ = driver.communicate(timeout=60)
        return None, out


def _worker(trigger: Path, then: str) -> list[str]:
    """A worker that says it started (the clock steps), then runs ``then``."""
    return ["sh", "-c", f'touch "{trigger}"; {then}']


def test_a_forward_step_does_not_time_out_a_healthy_attempt(git_repo: Path, tmp_path: Path) -> None:
    trigger = tmp_path / "started"
    work = 'sleep 2; echo "{\\"ok\\": true}" > "out/$GITRUN_TASK.json"'
    write_run(
        git_repo,
        "r",
        [{"id": t, "outputs": [f"out/{t}.json"]} for t in ("t1", "t2")],
        {
            "executor": {"command": _worker(trigger, work), "isolation": "none"},
            "limits": {"timeout": "60s", "max_attempts": 1, "concurrency": 1, "canary": 0},
        },
    )
    commit_all(git_repo, "run")
    code, out = _finish(_stepped_driver(git_repo, trigger, +3600), timeout=90)
    assert trigger.exists(), out
    assert code == 0, out
    assert "halted" not in out, out
    for task in ("t1", "t2"):
        assert json.loads((git_repo / f"out/{task}.json").read_text()) == {"ok": True}
    records = [r for r in ledger_records(git_repo) if "attempt" in r]
    assert [(r["task"], r["outcome"], r["timed_out"]) for r in records] == [
        ("t1", "valid", False),
        ("t2", "valid", False),
    ], out


def test_a_backward_step_does_not_stretch_a_timeout(git_repo: Path, tmp_path: Path) -> None:
    trigger = tmp_path / "started"
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {
            "executor": {"command": _worker(trigger, "exec sleep 60"), "isolation": "none"},
            "limits": {"timeout": "2s", "max_attempts": 1, "canary": 0},
        },
    )
    commit_all(git_repo, "run")
    driver = _stepped_driver(git_repo, trigger, -3600)
    try:
        wait_until(driver, trigger.exists)
        stepped = time.monotonic()
        code, out = _finish(driver, timeout=20)
        took = time.monotonic() - stepped
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    # Killed near its 2 s (generous for a loaded machine), not an hour later.
    assert code == 1 and took < 8, f"exit {code} after {took:.1f} s: {out}"
    [record] = [r for r in ledger_records(git_repo) if "attempt" in r]
    assert record["timed_out"] is True and record["outcome"] == "missing", record


# A usage limit's reset is a wall-clock instant ("resets at 15:00"); parked,
# the governor holds starts until it on its own clock, converted once: a
# step of the wall clock afterwards neither ends the park early nor stretches it.
@pytest.mark.parametrize(
    ("step", "after", "held"),
    [
        (0, 59.0, "parked"),
        (0, 61.0, ""),
        (+3600, 1.0, "parked"),  # the wall clock passed the reset; 1 s went by
        (+3600, 61.0, ""),
        (-3600, 61.0, ""),  # the wall clock is an hour before the reset again
        (-3600, 59.0, "parked"),
    ],
)
def test_a_park_ends_on_the_governor_s_clock(
    monkeypatch: pytest.MonkeyPatch, step: float, after: float, held: str
) -> None:
    ticks = [1000.0]  # the injected monotonic clock
    governor = Governor(
        Limits(concurrency=2), tasks=4, spawns=0, canary=[], clock=lambda: ticks[-1]
    )
    reset = time.time() + 60
    governor.park(reset, "usage limit of claude")
    wall = time.time
    monkeypatch.setattr(time, "time", lambda: wall() + step)
    ticks.append(1000.0 + after)
    assert governor.slots(0, ticks[-1]) == (0 if held else 2)
    assert governor.held == held
    assert bool(governor.parked_text(ticks[-1])) == bool(held)
    assert governor.parked_until == reset  # said and recorded as the wall-clock instant
