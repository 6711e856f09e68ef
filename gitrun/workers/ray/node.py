"""What runs on a Ray node for one attempt: the command, its deadline, its outputs.

This module imports nothing but the standard library, and :mod:`gitrun.workers.ray.executor`
ships it to the cluster by value: a node needs Ray and Python, not gitrun.
Its scratch directory is filled and emptied by :mod:`gitrun.workers.carry`
(shipped with it, by value), as a local scratch attempt's is.

:func:`run_attempt` runs the attempt's command in its own process group, in a
scratch directory holding the task's inputs (or, in shared-filesystem mode,
in the repository itself), with the same timeout and kill escalation as a
local attempt, and returns the exit status, the log, timings and (scratch
mode) the bytes of the declared outputs, each under the size cap. Between the
Ray worker and the command stands a small guard process: should the worker
die (its node lost, the task force-cancelled, the driver gone), the guard
kills the command's whole group, so nothing of the attempt writes on.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from typing import Any

from gitrun.workers.carry import collect, materialize

LOG_LIMIT = 1 << 20  # bytes kept from the start of a worker's output
LOG_TAIL = 64 << 10  # bytes kept from its end once the limit is passed
EOF_GRACE = 2.0  # seconds to wait for the pipe to close after the worker exited
TICK = 0.2  # the longest the loop waits before it looks at deadlines again

# The guard: its own group's leader, the command's parent. It exits as the
# command did (the same code, or killed by the same signal), and kills its
# group the moment its parent, the Ray worker, is gone. Its SIGTERM handler
# (not SIG_IGN, which a command would inherit) lets a TERM to the group reach
# the command without ending the guard first.
GUARD = """
import os, select, signal, sys
parent = os.getppid()
signal.signal(signal.SIGTERM, lambda *_: None)
signal.signal(signal.SIGINT, lambda *_: None)
argv = sys.argv[1:]
pid = os.fork()
if pid == 0:
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(1, f"gitrun: cannot start {argv[0]!r}: {exc.strerror}\\n".encode())
    os._exit(127)
try:
    exited = os.pidfd_open(pid)
except (AttributeError, OSError):
    exited = None
while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    select.select([exited] if exited is not None else [], [], [], 0.5 if exited is not None else 0.05)
    if os.getppid() != parent:
        os.killpg(0, signal.SIGKILL)
code = os.waitstatus_to_exitcode(status)
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


def run_attempt(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one attempt as ``spec`` says; see :mod:`gitrun.workers.ray.executor` for its fields."""
    started, began = time.time(), time.monotonic()  # for the record; for the duration
    scratch = None
    cwd = spec.get("cwd")
    env = dict(os.environ)
    env.update(spec["env"])
    usage = spec.get("usage")  # where the worker may write what it used, on this node
    usage_dir = tempfile.mkdtemp(prefix="gitrun-usage-") if usage else None
    if usage and usage_dir:
        env[usage["env"]] = os.path.join(usage_dir, "usage.json")
    try:
        if cwd is None:
            scratch = tempfile.mkdtemp(prefix="gitrun-attempt-")
            materialize(scratch, spec["files"], spec["outputs"])
            cwd = env["GITRUN_REPO"] = scratch
        result = _run(spec, cwd, env)
        outputs, refused = ({}, {}) if scratch is None else collect(scratch, spec)
        if usage and usage_dir:
            result["usage_file"] = _read_at_most(env[usage["env"]], int(usage["max"]) + 1)
    finally:
        for temporary in (scratch, usage_dir):
            if temporary is not None:
                shutil.rmtree(temporary, ignore_errors=True)
    took = time.monotonic() - began
    result.update(outputs=outputs, refused=refused, started=started, ended=time.time(), took=took)
    result["node"] = _node_address()
    return result


def _read_at_most(path: str, size: int) -> bytes | None:
    """The first ``size`` bytes of a regular file; None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read(size)


def _run(spec: dict[str, Any], cwd: str, env: dict[str, str]) -> dict[str, Any]:
    # -S -E: the guard needs the standard library only, and starts in ~20 ms.
    argv = [sys.executable, "-S", "-E", "-c", GUARD, *spec["argv"]]
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    log = _Log()
    exit_fd = _pidfd(proc.pid)  # wakes the loop at the exit, where the OS offers one
    deadline = time.monotonic() + float(spec["timeout"])  # no step of the wall clock moves it
    grace = float(spec["kill_grace"])
    kill_at: float | None = None
    timed_out = eof = False
    exited_at: float | None = None
    try:
        while not eof or exited_at is None:
            now = time.monotonic()
            if exited_at is not None and now >= exited_at + EOF_GRACE:
                break  # a process that left the group holds the pipe: do not wait for it
            if exited_at is None and _has_exited(proc.pid):
                exited_at = now
                _signal_group(proc.pid, signal.SIGKILL)  # what it left in its group goes too
                continue
            if exited_at is None and now >= deadline and not timed_out:
                timed_out = True
                _signal_group(proc.pid, signal.SIGTERM)
                kill_at = now + grace
            if kill_at is not None and now >= kill_at and exited_at is None:
                _signal_group(proc.pid, signal.SIGKILL)
                kill_at = None
            watched = [] if eof else [fd]
            if exit_fd is not None and exited_at is None:
                watched.append(exit_fd)
            if watched:
                ready = select.select(watched, [], [], TICK)[0]
                if fd in ready:
                    eof = log.read(fd)
            else:
                time.sleep(TICK)
    except BaseException:
        # Cancelled (ray.cancel raises KeyboardInterrupt here): the same
        # stop as a local attempt's, TERM to the group, KILL after the grace.
        _signal_group(proc.pid, signal.SIGTERM)
        end = time.monotonic() + grace
        while not _has_exited(proc.pid) and time.monotonic() < end:
            time.sleep(0.05)
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        proc.stdout.close()
        if exit_fd is not None:
            os.close(exit_fd)
    status = proc.wait()
    return {"status": status, "timed_out": timed_out, **log.result()}


class _Log:
    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def read(self, fd: int) -> bool:
        """Read what is there; whether the pipe is at its end."""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return False
            except OSError:
                return True
            if not chunk:
                return True
            room = LOG_LIMIT - len(self.head)
            self.head += chunk[: max(room, 0)]
            self.dropped += max(0, len(chunk) - max(room, 0))
            self.tail += chunk
            del self.tail[: max(0, len(self.tail) - LOG_TAIL)]

    def result(self) -> dict[str, Any]:
        return {"log": bytes(self.head), "dropped": self.dropped, "tail": bytes(self.tail)}


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux 5.3 or later: the loop polls
        return None


def _has_exited(pid: int) -> bool:
    """Whether the child exited, without reaping it: until it is reaped its
    pid (a zombie's) still names the group gitrun signals."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _node_address() -> str:
    try:
        # deferred: ray is an optional extra (gitrun[ray])
        import ray

        return str(ray.util.get_node_ip_address())
    except Exception:  # pragma: no cover - outside a Ray worker
        import socket

        return socket.gethostname()
