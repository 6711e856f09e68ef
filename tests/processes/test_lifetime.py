"""Every process an attempt starts ends with the attempt, with real daemons.

A worker that leaves a daemon behind in a session of its own, with its
environment cleared (nothing names it as the attempt's), must not write on
after its attempt ended: under bubblewrap its PID namespace ends with it,
without bubblewrap its cgroup is killed. The committed output stays as it
was validated and ``land`` takes it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitrun.processes import cgroups
from gitrun.processes.cgroups import HIERARCHIES, cgroup_root
from gitrun.workers.sandbox import probe
from tests.helpers import commit_all, git, run_gitrun, wait_for, write_run

# The daemon's own sleep names it (its environment is cleared): the test
# finds it by this, and kills what it finds when it is done.
MARK = "3.0417"
DAEMON = (
    "mkdir -p out/n1; "
    'printf \'{"task": "%s"}\\n\' "$GITRUN_TASK" > out/n1/r.json; '
    f"setsid env -i sh -c 'sleep {MARK}; echo GARBAGE > out/n1/r.json' "
    "< /dev/null > /dev/null 2>&1 & "
    "sleep 0.5"  # the worker goes on a while: the daemon has left its group by then
)


def _daemons() -> list[int]:
    """The pids of the daemon's processes (its shell and its sleep)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if MARK.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                found.append(int(name))
    return found


@pytest.fixture
def no_daemon_left() -> Iterator[None]:
    """A test leaves no daemon behind, whatever it found."""
    try:
        yield
    finally:
        for pid in _daemons():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _daemon_run(repo: Path, isolation: str, more: str = "") -> None:
    tasks: list[dict[str, object]] = [
        {"id": "n1", "owns": ["out/n1/"], "outputs": ["out/n1/r.json"]}
    ]
    packet = {
        "executor": {"preset": "shell", "shell": DAEMON + more, "isolation": isolation},
        "limits": {"canary": 0, "timeout": "60s"},
    }
    write_run(repo, "r", tasks, packet)
    commit_all(repo, "run r")


def _assert_the_daemon_ended_with_its_attempt(repo: Path) -> None:
    began = time.monotonic()
    started = run_gitrun(repo, "start", "r")
    assert started.returncode == 0, started.stdout + started.stderr
    assert _daemons() == [], "the attempt's daemon outlived it"
    # Past the moment the daemon would have written, had it lived on.
    time.sleep(max(0.0, began + float(MARK) + 0.5 - time.monotonic()))
    committed = git(repo, "show", "gitrun/r:out/n1/r.json")
    assert committed == '{"task": "n1"}\n'
    assert (repo / "out/n1/r.json").read_text() == committed
    landed = run_gitrun(repo, "land", "r")
    assert landed.returncode == 0, landed.stdout + landed.stderr
    assert (repo / "out/n1/r.json").read_text() == committed


@pytest.mark.skipif(probe() is not None, reason=str(probe()))
def test_a_daemon_ends_with_its_attempt_under_bubblewrap(
    git_repo: Path, no_daemon_left: None
) -> None:
    _daemon_run(git_repo, "sandbox")
    _assert_the_daemon_ended_with_its_attempt(git_repo)


@pytest.mark.skipif(cgroup_root()[0] is None, reason=cgroup_root()[1])
def test_a_daemon_ends_with_its_attempt_in_its_cgroup(git_repo: Path, no_daemon_left: None) -> None:
    seen = git_repo.parent / "cgroup"
    _daemon_run(git_repo, "none", f"; grep '^0::' /proc/self/cgroup > {seen}")
    _assert_the_daemon_ended_with_its_attempt(git_repo)
    # The worker was in a cgroup of its attempt's own, removed since.
    own = seen.read_text().strip().removeprefix("0::")
    assert own.rpartition("/")[2].startswith("gitrun-attempt-")
    hierarchy = next(h for h in HIERARCHIES if Path(h, "cgroup.controllers").exists())
    assert not Path(hierarchy, own.lstrip("/")).exists()


@pytest.mark.skipif(cgroup_root()[0] is None, reason=cgroup_root()[1])
def test_a_worker_gone_before_its_entry_is_seen_is_waited_for_no_longer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker that ends at once is a zombie (its command line empty) until
    the driver reaps it, after the launch: the launch does not wait for it
    to show the worker's command line. It waited the whole patience, 5 s a
    launch, for every worker that had already ended (here a patience of a
    minute: a return within half of it is no wait)."""
    monkeypatch.setattr(cgroups, "PATIENCE", 60.0)
    root, _why = cgroup_root()
    assert root is not None
    group = cgroups.AttemptGroup.make(root, os.urandom(8).hex())
    try:
        proc = subprocess.Popen(group.wrap(["true"]))
        try:
            wait_for(lambda: _state(proc.pid) == "Z", what="the worker ended, unreaped")
            began = time.monotonic()
            group.entered(proc.pid)
            assert time.monotonic() - began < 30, "entered() waited out its patience"
        finally:
            proc.wait()
    finally:
        group.end()


def _state(pid: int) -> str:
    """A process's state letter from /proc (R, S, Z, ...)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rpartition(")")[2].split()[0]
