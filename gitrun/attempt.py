"""One attempt as a child process: its own process group, a bounded log, a clean stop.

A thread per attempt copies the child's output into its log and blocks in
``wait()``; the driver enforces deadlines and stops by signalling the whole
process group, so no grandchild outlives its attempt.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

LOG_LIMIT = 1 << 20  # bytes kept from the start of a worker's output
LOG_TAIL = 64 << 10  # bytes kept from its end once the limit is passed
TERM_GRACE = 5.0  # seconds between SIGTERM and SIGKILL


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
    def __init__(
        self,
        task: str,
        number: int,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        log_path: Path,
        timeout: float,
        done: queue.Queue[AttemptEnd],
    ) -> None:
        self.task = task
        self.number = number
        self.started = time.time()
        self.deadline = self.started + timeout
        self.timed_out = False
        self.stopped = False
        self._kill_at: float | None = None
        self._done = done
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("wb")
        self.proc: subprocess.Popen[bytes] | None
        try:
            self.proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, led by the worker
            )
        except OSError as exc:
            self._log.write(f"gitrun: cannot start {argv[0]!r}: {exc.strerror}\n".encode())
            self._log.close()
            self.proc = None
            reason = f"{argv[0]}: {exc.strerror}"
            end = AttemptEnd(
                task, number, self.started, time.time(), 127, None, False, False, reason
            )
            done.put(end)
            return
        self.pid = self.proc.pid
        self._tail = bytearray()
        self._reader = threading.Thread(target=self._copy_output, daemon=True)
        self._reader.start()
        threading.Thread(target=self._wait, daemon=True).start()

    # -- stopping --------------------------------------------------------------

    def expire(self) -> None:
        """The deadline passed: terminate the group (SIGKILL follows after a grace)."""
        if not self.timed_out:
            self.timed_out = True
            self._terminate()

    def stop(self) -> None:
        """gitrun is stopping: terminate the group."""
        if not self.stopped:
            self.stopped = True
            self._terminate()

    def escalate(self, now: float) -> None:
        """Send SIGKILL to a group that ignored SIGTERM for the grace period."""
        if self._kill_at is not None and now >= self._kill_at:
            self._signal_group(signal.SIGKILL)
            self._kill_at = None

    @property
    def next_event(self) -> float:
        return self._kill_at if self._kill_at is not None else self.deadline

    def _terminate(self) -> None:
        self._signal_group(signal.SIGTERM)
        self._kill_at = time.time() + TERM_GRACE

    def _signal_group(self, sig: int) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    # -- threads ---------------------------------------------------------------

    def _copy_output(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        written = 0
        dropped = 0
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            self._tail += chunk
            if len(self._tail) > LOG_TAIL:
                del self._tail[: len(self._tail) - LOG_TAIL]
            room = LOG_LIMIT - written
            if room > 0:
                self._log.write(chunk[:room])
                written += min(room, len(chunk))
            dropped += max(0, len(chunk) - max(room, 0))
        if dropped:
            self._log.write(f"\n[gitrun: {dropped} bytes dropped; the last ones follow]\n".encode())
            self._log.write(bytes(self._tail))
        self._log.close()

    def _wait(self) -> None:
        assert self.proc is not None
        status = self.proc.wait()
        # Whatever the worker left behind in its group goes with it.
        self._signal_group(signal.SIGKILL)
        self._reader.join(timeout=2.0)
        if self._reader.is_alive():  # a grandchild escaped the group and holds the pipe
            try:
                assert self.proc.stdout is not None
                self.proc.stdout.close()
            except OSError:
                pass
        code = status if status >= 0 else None
        sig = -status if status < 0 else None
        tail = bytes(self._tail[-4096:]).decode(errors="replace")
        self._done.put(
            AttemptEnd(
                self.task,
                self.number,
                self.started,
                time.time(),
                code,
                sig,
                self.timed_out,
                self.stopped,
                tail,
            )
        )
