"""Attempts as child processes: their own process group, a bounded log, a clean stop.

One :class:`Monitor` watches every running attempt from the driver's thread
with a selector over each worker's output pipe and, on Linux, a pidfd that
becomes readable when the worker exits — no thread per attempt and no
polling. Elsewhere exits are polled each tick. Deadlines and stops signal the
whole process group, so no grandchild outlives its attempt.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

LOG_LIMIT = 1 << 20  # bytes kept from the start of a worker's output
LOG_TAIL = 64 << 10  # bytes kept from its end once the limit is passed
TERM_GRACE = 5.0  # seconds between SIGTERM and SIGKILL
EOF_GRACE = 2.0  # seconds to wait for the pipe to close after the worker exited
POLL_TICK = 0.05  # exit polling interval where pidfds are not available


@dataclass(frozen=True)
class AttemptEnd:
    task: str
    attempt: int
    started: float
    ended: float
    exit_code: int | None
    signal: int | None
    timed_out: bool
    stopped: bool  # stopped by gitrun (Ctrl-C, SIGTERM)
    tail: str  # the last lines of the worker's output, for diagnosis

    @property
    def duration(self) -> float:
        return self.ended - self.started


class Attempt:
    """A started worker. Create it with :meth:`Monitor.launch`."""

    def __init__(
        self, task: str, number: int, timeout: float, kill_grace: float = TERM_GRACE
    ) -> None:
        self.task = task
        self.kill_grace = kill_grace
        self.number = number
        self.started = time.time()
        self.deadline = self.started + timeout
        self.timed_out = False
        self.stopped = False
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid = 0
        self.status: int | None = None  # set once reaped
        self.exited_at = 0.0
        self.eof = False
        self._kill_at: float | None = None
        self._log: IO[bytes] | None = None
        self._written = 0
        self._dropped = 0
        self._tail = bytearray()
        self.failure: str | None = None  # why it could not start

    # -- stopping --------------------------------------------------------------

    def expire(self) -> None:
        """The deadline passed: terminate the group (SIGKILL follows after a grace)."""
        if not self.timed_out and self.status is None:
            self.timed_out = True
            self._terminate()

    def stop(self) -> None:
        """gitrun is stopping: terminate the group."""
        if not self.stopped and self.status is None:
            self.stopped = True
            self._terminate()

    def escalate(self, now: float) -> None:
        """SIGKILL a group that ignored SIGTERM for the grace period."""
        if self._kill_at is not None and now >= self._kill_at:
            self.signal_group(signal.SIGKILL)
            self._kill_at = None

    @property
    def next_event(self) -> float:
        if self.status is not None:
            return self.exited_at + EOF_GRACE
        return self._kill_at if self._kill_at is not None else self.deadline

    def _terminate(self) -> None:
        self.signal_group(signal.SIGTERM)
        self._kill_at = time.time() + self.kill_grace

    def signal_group(self, sig: int) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    # -- output and exit -------------------------------------------------------------

    def take_output(self, chunk: bytes) -> None:
        self._tail += chunk
        if len(self._tail) > LOG_TAIL:
            del self._tail[: len(self._tail) - LOG_TAIL]
        room = LOG_LIMIT - self._written
        if room > 0:
            assert self._log is not None
            self._log.write(chunk[:room])
            self._written += min(room, len(chunk))
        self._dropped += max(0, len(chunk) - max(room, 0))

    def close_log(self) -> None:
        if self._log is None:
            return
        if self._dropped:
            note = f"\n[gitrun: {self._dropped} bytes dropped; the last ones follow]\n"
            self._log.write(note.encode() + bytes(self._tail))
        self._log.close()
        self._log = None

    def end(self) -> AttemptEnd:
        status = self.status if self.status is not None else 127
        return AttemptEnd(
            self.task,
            self.number,
            self.started,
            self.exited_at or time.time(),
            status if status >= 0 else None,
            -status if status < 0 else None,
            self.timed_out,
            self.stopped,
            self.failure or bytes(self._tail[-4096:]).decode(errors="replace"),
        )


class Monitor:
    """Starts attempts and reports the ones that ended."""

    def __init__(self, kill_grace: float = TERM_GRACE) -> None:
        self.kill_grace = kill_grace
        self._selector = selectors.DefaultSelector()
        self._use_pidfd = hasattr(os, "pidfd_open")
        self._live: set[Attempt] = set()
        self._failed: list[Attempt] = []

    def launch(
        self,
        task: str,
        number: int,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        log_path: Path,
        timeout: float,
    ) -> Attempt:
        attempt = Attempt(task, number, timeout, self.kill_grace)
        log = log_path.open("wb")
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, led by the worker
            )
        except OSError as exc:
            attempt.failure = f"{argv[0]}: {exc.strerror}"
            log.write(f"gitrun: cannot start {argv[0]!r}: {exc.strerror}\n".encode())
            log.close()
            attempt.status = 127
            attempt.exited_at = time.time()
            self._failed.append(attempt)
            return attempt
        attempt.proc, attempt.pid, attempt._log = proc, proc.pid, log
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        self._selector.register(proc.stdout, selectors.EVENT_READ, (attempt, "out"))
        if self._use_pidfd:
            try:
                pidfd = os.pidfd_open(proc.pid)
                self._selector.register(pidfd, selectors.EVENT_READ, (attempt, "exit"))
            except OSError:
                self._use_pidfd = False
        self._live.add(attempt)
        return attempt

    def poll(self, timeout: float) -> list[AttemptEnd]:
        """Wait up to ``timeout`` seconds; return the attempts that ended."""
        ended = [a.end() for a in self._failed]
        self._failed.clear()
        if ended:
            timeout = 0
        if not self._use_pidfd:
            timeout = min(timeout, POLL_TICK)
        if self._selector.get_map():
            events = self._selector.select(max(0.0, timeout))
        else:
            time.sleep(max(0.0, timeout))
            events = []
        for key, _mask in events:
            attempt, kind = key.data
            if kind == "out":
                self._read(attempt, key.fileobj)
            else:
                self._selector.unregister(key.fileobj)
                os.close(key.fd)
                self._reap(attempt)
        now = time.time()
        for attempt in list(self._live):
            if attempt.status is None and not self._use_pidfd:
                self._reap(attempt, block=False)
            if attempt.status is not None and (attempt.eof or now >= attempt.exited_at + EOF_GRACE):
                self._finish(attempt)
                ended.append(attempt.end())
        return ended

    @property
    def running(self) -> set[Attempt]:
        return set(self._live)

    def _read(self, attempt: Attempt, stream: Any) -> None:
        fd = stream.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                attempt.eof = True
                self._selector.unregister(stream)
                return
            attempt.take_output(chunk)

    def _reap(self, attempt: Attempt, block: bool = True) -> None:
        assert attempt.proc is not None
        if block:
            status = attempt.proc.wait()
        else:
            polled = attempt.proc.poll()
            if polled is None:
                return
            status = polled
        attempt.status = status
        attempt.exited_at = time.time()
        # Whatever the worker left behind in its group goes with it.
        attempt.signal_group(signal.SIGKILL)

    def _finish(self, attempt: Attempt) -> None:
        self._live.discard(attempt)
        assert attempt.proc is not None and attempt.proc.stdout is not None
        if not attempt.eof:  # a grandchild escaped the group and holds the pipe
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(attempt.proc.stdout)
        attempt.proc.stdout.close()
        attempt.close_log()


def kill_recorded_group(record: dict[str, Any]) -> None:
    """SIGKILL the process group of an attempt a dead driver recorded, if its
    leader is still the same process (psutil compares start times, so a
    reused pid is left alone), and wait briefly for the group to go."""
    import psutil

    pid = record.get("pid")
    if not isinstance(pid, int):
        return
    try:
        proc = psutil.Process(pid)
        created = record.get("create_time")
        if created is not None and abs(proc.create_time() - created) > 0.01:
            return  # the pid was reused by another process
    except psutil.Error:
        pass  # the leader is gone; members of its group may remain
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        if not any(is_running(p) for p in _group_members(pid)):
            return
        time.sleep(0.02)


def _group_members(pgid: int) -> list[int]:
    import psutil

    members = []
    for proc in psutil.process_iter(["pid"]):
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) == pgid:
                members.append(proc.pid)
    return members


def is_running(pid: int) -> bool:
    """Whether ``pid`` runs: not gone, and not a zombie nobody reaped yet (a
    container's init may never reap the orphans it inherits)."""
    import psutil

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False
