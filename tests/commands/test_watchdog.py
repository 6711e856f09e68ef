"""The watchdog and status read the live driver's state from its owner record."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gitrun.cli.main import app
from gitrun.commands.watchdog import RunHealth, inspect_runs, kill_stale
from gitrun.processes.reaper import group_members
from gitrun.store.local import LocalPaths
from gitrun.store.lock import (
    LiveAttempt,
    LiveState,
    is_locked,
    lock_holders,
    read_owner,
    run_locked,
)
from tests.forkserver import run_gitrun_call
from tests.helpers import commit_all, gitrun_process, run_gitrun, wait_for, wait_until, write_run

runner = CliRunner()


def test_the_owner_record_carries_the_drivers_live_state(git_repo: Path) -> None:
    write_run(git_repo, "r", [{"id": "t1", "outputs": ["out/t1.json"]}])
    local = LocalPaths.of(git_repo, "r")
    overdue = LiveAttempt("t1", 2, 0.0, time.time() - 3600)
    state = LiveState(concurrency=2, max_concurrency=4, kill_grace=5.0, running=[overdue])
    with run_locked(local, "r") as lock:
        lock.beat(state)
        owner = read_owner(local)
        assert owner is not None and owner.state == state
        [health] = inspect_runs(git_repo)
        assert health.stale and health.overdue == ["t1#2"]
        assert "attempts past their deadline: t1#2" in health.reason
        shown = runner.invoke(app, ["status", "r"])
        assert "concurrency 2/4" in shown.output


def test_a_damaged_live_state_is_read_as_nothing_not_a_crash(git_repo: Path) -> None:
    write_run(git_repo, "r", [{"id": "t1", "outputs": ["out/t1.json"]}])
    local = LocalPaths.of(git_repo, "r")
    with run_locked(local, "r") as lock:
        lock.beat()
        record = json.loads(local.owner.read_text())
        damaged = {"kill_grace": "soon", "running": ["junk", {"deadline": "never"}, 7]}
        local.owner.write_text(json.dumps({**record, "state": damaged}))
        [health] = inspect_runs(git_repo)
        assert not health.stale
        owner = read_owner(local)
        assert owner is not None and owner.state == LiveState()
        record["state"] = ["not", "a", "table"]
        local.owner.write_text(json.dumps(record))
        owner = read_owner(local)
        assert owner is not None and owner.state == LiveState()


def _alive(pid: int) -> bool:
    import psutil

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _hold(lock: Path) -> subprocess.Popen[bytes]:
    """`flock LOCK sleep 30` in a group of its own (its sleep inherits the lock)."""
    return subprocess.Popen(["flock", str(lock), "sleep", "30"], start_new_session=True)


def _release(holder: subprocess.Popen[bytes]) -> None:
    os.killpg(holder.pid, signal.SIGKILL)
    holder.wait(timeout=10)
    wait_for(
        lambda: not any(_alive(p.pid) for p in group_members(holder.pid)),
        30,
        what="the lock holder's group ended",
    )


def test_lock_holders_is_the_kernel_s_list(git_repo: Path) -> None:
    local = LocalPaths.of(git_repo, "r")
    local.root.mkdir(parents=True)
    local.lock.touch()
    assert lock_holders(local.lock) == set()
    holder = _hold(local.lock)
    try:
        wait_for(lambda: is_locked(local), 30, what="the holder took the lock")
        assert lock_holders(local.lock) == {holder.pid}
        assert lock_holders(local.lock, table=git_repo / "no-such-table") is None
    finally:
        _release(holder)
    assert lock_holders(local.lock) == set()


def test_watchdog_kill_never_kills_a_process_a_forged_owner_record_names(
    git_repo: Path,
) -> None:
    """The red-team repro: any process holds the run lock, and the owner
    record names a sacrificial `setsid sleep` by pid, create time and command
    line, with an old heartbeat. `watchdog --kill` must refuse, naming the pid."""
    import psutil

    write_run(git_repo, "r", [{"id": "t1", "outputs": ["out/t1.json"]}])
    local = LocalPaths.of(git_repo, "r")
    local.root.mkdir(parents=True)
    local.lock.touch()
    holder = _hold(local.lock)
    victim = subprocess.Popen(["setsid", "sleep", "1000"])
    try:
        wait_for(lambda: is_locked(local), 30, what="the holder took the lock")
        wait_for(
            lambda: psutil.Process(victim.pid).cmdline() == ["sleep", "1000"],
            30,
            what="the victim became `sleep 1000`",
        )
        _forge_owner(local, victim.pid)
        out = _watchdog_kill(git_repo, "1s")
        said = out.stdout + out.stderr
        assert out.returncode == 1, said
        assert _alive(victim.pid), "the watchdog killed a process gitrun never started"
        assert f"not stopped: the owner record {local.owner} names pid {victim.pid}" in said
        assert f"held by pid {holder.pid}" in said
        assert "Traceback" not in said
    finally:
        victim.kill()
        victim.wait(timeout=10)
        _release(holder)


def test_watchdog_kill_stops_a_real_stale_driver_and_only_with_proof(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real driver holds the lock: the kernel's lock table proves its pid,
    so it is killed, and its worker with it. Where that table cannot be read,
    nothing is killed and the message says why."""
    import gitrun.store.lock

    hang = "import time\nwhile True: time.sleep(1)"
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {"executor": {"command": [sys.executable, "-c", hang]}, "limits": {"timeout": "10m"}},
    )
    commit_all(git_repo, "define r")
    local = LocalPaths.of(git_repo, "r")
    driver = gitrun_process(git_repo, "start", "r", capture=False)
    worker = 0
    try:

        def worker_pid() -> int:
            lines = local.running.read_text().splitlines() if local.running.exists() else []
            pids = [r["pid"] for r in map(json.loads, lines) if "pid" in r]
            return int(pids[0]) if pids else 0

        wait_for(lambda: bool(worker_pid()), 60, what="the driver recorded its worker's pid")
        worker = worker_pid()
        [health] = inspect_runs(git_repo, stale_after=0.0)
        assert health.stale and health.pid == driver.pid
        with monkeypatch.context() as patched:
            patched.setattr(gitrun.store.lock, "PROC_LOCKS", git_repo / "no-such-table")
            said = kill_stale(git_repo, health)
        assert "not stopped: this system has no" in said and str(driver.pid) in said
        assert driver.poll() is None and _alive(worker)
        assert kill_stale(git_repo, health) == "r: stopped; continue it with `gitrun resume r`"
        assert driver.wait(timeout=30) == -signal.SIGKILL
        wait_for(lambda: not _alive(worker), 30, what="the driver's worker ended")
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(timeout=10)
        if worker and _alive(worker):
            os.killpg(worker, signal.SIGKILL)


_FLOCK_AND_SLEEP = (
    "import fcntl, sys, time\n"
    "f = open(sys.argv[1], 'a')\n"
    "fcntl.flock(f, fcntl.LOCK_EX)\n"
    "time.sleep(1000)\n"
)


def test_watchdog_kill_never_kills_through_a_hard_linked_lock(git_repo: Path) -> None:
    """The red-team repro: an unrelated process holds an flock on a file
    outside the repository; the run's driver.lock is replaced by a hard link
    to that file (the same inode, so the kernel lists the victim as its
    holder) and the owner record names the victim. Nothing is killed, the
    run is reported damaged, and the watchdog still exits 1, never 70."""

    write_run(git_repo, "r", [{"id": "t1", "outputs": ["out/t1.json"]}])
    local = LocalPaths.of(git_repo, "r")
    local.root.mkdir(parents=True)
    outside = git_repo.parent / f"{git_repo.name}-victim.lock"
    outside.touch()
    os.link(outside, local.lock)
    victim = subprocess.Popen(
        ["setsid", sys.executable, "-c", _FLOCK_AND_SLEEP, str(outside)],
    )
    try:
        wait_for(
            lambda: lock_holders(outside) == {victim.pid}, 30, what="the victim took the flock"
        )
        _forge_owner(local, victim.pid)
        out = _watchdog_kill(git_repo, "1m")
        said = out.stdout + out.stderr
        assert out.returncode == 1, said
        assert _alive(victim.pid), "the watchdog killed a process through a hard-linked lock"
        assert "r: damaged:" in said and "2 links" in said, said
        assert "not stopped" in said, said
        assert "Traceback" not in said
        # the proof itself refuses the linked lock, whatever the inspection said
        posing = RunHealth("r", "alive", victim.pid, socket.gethostname(), 3600.0, stale=True)
        refused = kill_stale(git_repo, posing)
        assert refused.startswith("r: not stopped: the run lock") and "2 links" in refused
        assert _alive(victim.pid)
    finally:
        victim.kill()
        victim.wait(timeout=10)
        outside.unlink()


@pytest.mark.parametrize("damage", ["symlink-loop", "symlink-out", "directory"])
def test_one_damaged_run_does_not_blind_the_watchdog_to_the_others(
    git_repo: Path, damage: str
) -> None:
    """A driver.lock that is a symlink (a loop, or pointing out of `.git/`)
    or a directory made `gitrun watchdog` exit 70 for every run. The damaged
    run is reported stale with its reason; the other run is still inspected."""
    write_run(git_repo, "bad", [{"id": "t1", "outputs": ["out/t1.json"]}])
    write_run(git_repo, "good", [{"id": "t1", "outputs": ["out/t2.json"]}])
    bad = LocalPaths.of(git_repo, "bad")
    bad.root.mkdir(parents=True)
    if damage == "symlink-loop":
        bad.lock.symlink_to(bad.lock.name)
    elif damage == "symlink-out":
        target = git_repo / "elsewhere.lock"
        target.touch()
        bad.lock.symlink_to(target)
    else:
        bad.lock.mkdir()
    good = LocalPaths.of(git_repo, "good")
    with run_locked(good, "good"):
        [found_bad, found_good] = inspect_runs(git_repo)
        assert found_bad.run == "bad" and found_bad.stale and found_bad.driver == "damaged"
        assert found_bad.reason.startswith("damaged: ") and str(bad.lock) in found_bad.reason
        assert found_good.run == "good" and found_good.driver == "alive"
        assert not found_good.stale
        out = run_gitrun_call(["watchdog", "--kill"], git_repo, timeout=120)
    said = out.stdout + out.stderr
    assert out.returncode == 1, said
    assert "bad: damaged" in said and "good: driver pid" in said, said
    assert "bad: not stopped" in said, said
    assert "Traceback" not in said and "internal error" not in said


def _forge_owner(local: LocalPaths, pid: int) -> None:
    """An owner record naming ``pid`` exactly as a driver record would, stale."""
    import psutil

    seen = psutil.Process(pid)
    forged = {
        "v": 1,
        "pid": pid,
        "host": socket.gethostname(),
        "started": time.time() - 3600,
        "heartbeat": time.time() - 3600,
        "create_time": seen.create_time(),
        "cmdline": seen.cmdline(),
        "state": {},
    }
    local.owner.write_text(json.dumps(forged))


def _watchdog_kill(repo: Path, stale: str) -> subprocess.CompletedProcess[str]:
    return run_gitrun_call(["watchdog", "--stale", stale, "--kill"], repo, timeout=120)


# -- a run nobody drives ----------------------------------------------------------------

# t1 writes its output at once; every other task hangs until it is killed.
_HALF = 'if [ "$GITRUN_TASK" = t1 ]; then echo "{}" > "$GITRUN_OUTPUTS"; else sleep 600; fi'


def _half_done_run(repo: Path) -> None:
    write_run(
        repo,
        "r",
        [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in (1, 2, 3)],
        {
            "executor": {"command": ["sh", "-c", _HALF]},
            "limits": {"concurrency": 1, "timeout": "10m"},
        },
    )
    commit_all(repo, "define r")


def _running_pids(local: LocalPaths) -> list[int]:
    """The workers the run's journal says run now."""
    from gitrun.store.journal import running_records

    return [entry.pid for entry in running_records(local).values() if entry.pid]


def test_a_run_whose_driver_was_killed_halfway_is_stalled_since_its_last_heartbeat(
    git_repo: Path,
) -> None:
    """SIGKILL a real driver once t1 is committed and t2 runs, and its worker
    with it: the watchdog exits 1 and says since when the run stalled (UTC),
    and so does status, in text and JSON. Before, the watchdog said ok."""
    _half_done_run(git_repo)
    local = LocalPaths.of(git_repo, "r")
    driver = gitrun_process(git_repo, "start", "r", capture=False)
    workers: list[int] = []
    try:
        committed = git_repo / ".git/refs/heads/gitrun/r"

        def t1_in_and_t2_running() -> bool:
            if not committed.exists() or not _running_pids(local):
                return False
            log = subprocess.run(
                ["git", "log", "--format=%B", "gitrun/r"], cwd=git_repo, capture_output=True
            )
            return b"Gitrun-Task: t1" in log.stdout

        wait_until(driver, t1_in_and_t2_running)
        driver.kill()
        assert driver.wait(timeout=30) == -signal.SIGKILL
        workers = _running_pids(local)
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        wait_for(
            lambda: not any(_alive(pid) for pid in workers),
            30,
            what="the killed driver's workers ended",
        )
        owner = read_owner(local)  # the killed driver's record stays: its last heartbeat
        assert owner is not None
        shown = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(owner.heartbeat))

        out = run_gitrun(git_repo, "watchdog")
        assert out.returncode == 1, out.stdout + out.stderr
        assert f"r: no driver; STALE: stalled since {shown}: 2 tasks not done" in out.stdout
        assert "`gitrun resume r`" in out.stdout
        [found] = json.loads(run_gitrun(git_repo, "watchdog", "--json").stdout)
        assert found["stale"] and found["stalled_since"] == shown

        text = run_gitrun(git_repo, "status", "r").stdout
        assert text.startswith(f"run 'r': stalled since {shown}: tasks are left"), text
        assert f"r: stalled since {shown}; 1 done" in run_gitrun(git_repo, "status").stdout
        data = json.loads(run_gitrun(git_repo, "status", "r", "--json").stdout)
        assert data["stalled_since"] is not None
        assert abs(_epoch(data["stalled_since"]) - owner.heartbeat) < 0.01
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(timeout=10)
        for pid in workers or _running_pids(local):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()
