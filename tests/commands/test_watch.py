"""`gitrun status RUN --watch`: a run driven in another process, watched until it ends."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from gitrun.store.local import LocalPaths
from gitrun.store.lock import is_locked
from tests.helpers import (
    commit_all,
    fake_worker_run,
    gitrun_process,
    run_gitrun,
    user_env,
    wait_until,
)


def test_status_watch_follows_a_real_driver_and_ends_when_the_run_ends(
    git_repo: Path, tmp_path: Path
) -> None:
    """The second half of the run waits behind a gate the test opens only once
    the watch has shown the first half: it follows a live run however slowly a
    loaded machine starts it."""
    gate = tmp_path / "gate"
    later = [f"t0{n}" for n in range(5, 9)]
    spec = {"sleep": 0.3, "gate": str(gate), "gated": later}
    fake_worker_run(git_repo, "r", 8, spec, {"limits": {"concurrency": 2}})
    commit_all(git_repo, "define r")
    local = LocalPaths.of(git_repo, "r")
    driver = gitrun_process(git_repo, "start", "r", "--quiet", capture=False)
    watch: subprocess.Popen[str] | None = None
    try:
        wait_until(driver, lambda: is_locked(local), what="the driver took the run's lock")
        assert driver.poll() is None, "the driver ended before it was watched"
        watch = subprocess.Popen(
            [sys.executable, "-m", "gitrun", "status", "r", "--watch"],
            cwd=git_repo,
            env=user_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert watch.stdout is not None
        first = ""
        while not first.startswith("r: driving; "):  # a closed pipe reads "": the watch ended
            first = watch.stdout.readline()
            assert first, "the watch ended before it showed the run"
        gate.touch()
        rest, err = watch.communicate(timeout=120)  # it ends by itself
        out = first + rest
        assert watch.returncode == 0, out + err
        assert driver.wait(timeout=10) == 0  # and only once the run had ended
    finally:
        gate.touch()
        for proc in (driver, watch):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    lines = [line for line in out.splitlines() if line.startswith("r: driving; ")]
    done = [int(m[1]) for line in lines if (m := re.match(r"r: driving; (\d+) done", line))]
    assert done and done == sorted(done) and done[0] <= 4, out  # the gated half came after
    assert "attempt 1: done" in err, err  # one line per change, as a driver's plain lines
    assert "\n  total: 8 done, 0 running, 0 pending, 0 failed" in out, out


def test_status_watch_of_a_run_nobody_moves_prints_it_once(git_repo: Path) -> None:
    fake_worker_run(git_repo, "r", 2, {})
    commit_all(git_repo, "define r")
    out = run_gitrun(git_repo, "status", "r", "--watch")
    assert (out.returncode, out.stdout.splitlines()[0]) == (0, "run 'r': not started")
    refused = run_gitrun(git_repo, "status", "--watch")
    assert refused.returncode == 2 and "`gitrun status RUN --watch`" in refused.stderr
