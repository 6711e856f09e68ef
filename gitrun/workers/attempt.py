"""Attempts as child processes: their own process group, a bounded log, a clean stop.

The driver runs attempts through a :class:`Runner`: ``launch`` gives a
:class:`RunningAttempt`, ``poll`` the ones that ended. :class:`Monitor` is
the local one; :mod:`gitrun.workers.ray.executor` places attempts on a Ray cluster.

One :class:`Monitor` watches every running attempt from the driver's thread
with a selector over each worker's output pipe and, on Linux, a pidfd that
becomes readable when the worker exits — no thread per attempt and no
polling. Elsewhere exits are polled each tick. Deadlines and stops signal the
whole process group, so no grandchild outlives its attempt. Deadlines and
graces are on the monotonic clock (gitrun.clock); an attempt's start and end
are recorded on the wall clock as well.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import selectors
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gitrun.processes.cgroups import AttemptGroup, cgroup_root
from gitrun.processes.reaper import Launches, boot_clock, is_running, kill_recorded_group
from gitrun.processes.spawn import Process, Spawner, has_exited
from gitrun.store.records import warn_stderr
from gitrun.store.usage import Usage
from gitrun.visible import visible
from gitrun.workers.clients import ClientSigns, UnreachableWatch, exit_fault
from gitrun.workers.clientusage import USAGE_ENV, attempt_usage
from gitrun.workers.presets import client_signs, usage_reader

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gitrun.store.records import Warn

__all__ = [
    "Attempt",
    "AttemptEnd",
    "Monitor",
    "Runner",
    "RunningAttempt",
    "is_running",
    "kill_recorded_group",
]

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
    # Why the environment, not the task, failed (gitrun.workers.clients): a sentence
    # for the run's halt, or "" when the client showed no such sign.
    fault: str = ""
    # Why the machine running it, not the task, failed (a Ray node or worker
    # died): no attempt used, and the governor's breaker hears of it.
    lost: str = ""
    # Outputs the worker made that were not brought back (over the size cap):
    # a sentence for the ledger's reason.
    refused: str = ""
    # Why the worker could not be started at all ("`claude`: not found on
    # PATH"): no attempt used, and the run halts as an environment fault.
    unstarted: str = ""
    dispatch: str = "command"  # how it ran, as the ledger says: command or ray
    # What the worker's client reported it used (gitrun.workers.clientusage), or what
    # it wrote to $GITRUN_USAGE; None: nothing was reported, the cost is unknown.
    usage: Usage | None = None
    # Its start and end on the monotonic clock (``started`` and ``ended`` are
    # the wall clock's, for the ledger): what its duration is measured on.
    span: tuple[float, float] = (0.0, 0.0)

    @property
    def duration(self) -> float:
        return self.span[1] - self.span[0]


class RunningAttempt(Protocol):
    """What the driver knows of a started attempt, wherever it runs."""

    task: str
    number: int
    started: float  # wall clock, for the records
    began: float  # the same moment on the monotonic clock
    deadline: float  # monotonic, as are next_event and escalate's now
    # A local worker's pid, create time and command line, for the running
    # journal (a later driver signals it only while all three match); 0 and
    # None for an attempt that has no process on this machine.
    pid: int
    create_time: float | None
    cmdline: list[str] | None

    @property
    def next_event(self) -> float: ...

    def expire(self) -> None: ...

    def stop(self) -> None: ...

    def escalate(self, now: float) -> None: ...


class Runner(Protocol):
    """Starts attempts and reports the ones that ended."""

    def launch(
        self,
        task: str,
        number: int,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        log_path: Path,
        timeout: float,
        confine: Sequence[str] = (),
    ) -> RunningAttempt: ...

    def poll(self, timeout: float) -> list[AttemptEnd]: ...

    def close(self) -> None: ...


class Attempt:
    """A started worker. Create it with :meth:`Monitor.launch`."""

    def __init__(
        self,
        task: str,
        number: int,
        timeout: float,
        kill_grace: float = TERM_GRACE,
        argv: list[str] | None = None,
        usage_path: Path | None = None,
        warn: Warn = warn_stderr,
        log_path: Path | None = None,
    ) -> None:
        self.task = task
        self.kill_grace = kill_grace
        self.number = number
        self.started = time.time()  # for the ledger
        self.began = time.monotonic()  # for its deadline and duration
        self.deadline = self.began + timeout
        self.timed_out = False
        self.stopped = False
        self.proc: Process | None = None
        self.pid = 0
        self.out: int | None = None  # the read end of the worker's output pipe
        # What psutil saw right after the start, for the running journal:
        # a later driver signals the group only if these still match.
        self.create_time: float | None = None
        self.cmdline: list[str] | None = None
        self.status: int | None = None  # set once reaped
        self.exited_at = 0.0  # monotonic
        self.exited_wall = 0.0  # the same moment on the wall clock, for the ledger
        self.eof = False
        self._kill_at: float | None = None
        # The log is made when there is something to put in it: creating a
        # file costs more than the rest of a launch, and most workers of a
        # big fan-out print nothing (an earlier life's log is removed at launch).
        self.log_path = log_path
        self._log: int | None = None  # its descriptor, once made
        self._log_closed = False
        self._written = 0
        self._dropped = 0
        self._tail = bytearray()
        # Confined (gitrun.workers.sandbox), the group's leader is bubblewrap,
        # which a SIGTERM ends at once while the worker shuts down: until the
        # worker's output closes (or its grace passes) the leader is left
        # unreaped, so that its pid still names the group gitrun started.
        self.confined = False
        # Unconfined, where the machine allows: the attempt's own cgroup
        # (gitrun.processes.cgroups), emptied when it ends.
        self.group: AttemptGroup | None = None
        self.linger_until: float | None = None  # the leader ended; reaped by then
        self.failure: str | None = None  # why it could not start
        self.fault = ""  # the environment's fault, once the client showed one
        client = _client_of(argv[0]) if argv else None
        self._client = client
        self._watch = (
            UnreachableWatch(*client) if client is not None and client[1].unreachable else None
        )
        self._reader = usage_reader(argv) if argv and _reports_usage(argv[0]) else None
        self.usage_path = usage_path  # where the worker may write its usage ($GITRUN_USAGE)
        self._warn = warn
        self.usage: Usage | None = None
        self._said: str | None = None  # the client's readable output, for the tail

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
        if self.linger_until is not None:
            return min(self.linger_until, self._kill_at or self.linger_until)
        return self._kill_at if self._kill_at is not None else self.deadline

    def _terminate(self) -> None:
        self.signal_group(signal.SIGTERM)
        self._kill_at = time.monotonic() + self.kill_grace

    def signal_group(self, sig: int) -> None:
        """Signal the worker's group, only while the worker is not reaped: until
        then its pid (a zombie's at worst) cannot go to another process, so
        the group is still the one gitrun started."""
        if self.proc is not None and self.status is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    # -- output and exit -------------------------------------------------------------

    def take_output(self, chunk: bytes) -> None:
        if self._watch is not None and not self.fault:
            fault = self._watch.feed(chunk)
            if fault is not None and self.status is None:
                # The client cannot reach its model and will not stop trying:
                # end the attempt now instead of at its deadline.
                self.fault = f"environment fault: {self.task} attempt {self.number}: {fault}"
                self._terminate()
        if self._reader is not None:
            self._reader.feed(chunk)
        self._tail += chunk
        if len(self._tail) > LOG_TAIL:
            del self._tail[: len(self._tail) - LOG_TAIL]
        room = LOG_LIMIT - self._written
        if room > 0:
            self._log_write(chunk[:room])
            self._written += min(room, len(chunk))
        self._dropped += max(0, len(chunk) - max(room, 0))

    def _log_write(self, data: bytes) -> None:
        """Append to the log, made at the first write; a log that cannot be
        written loses the output, never the attempt (the tail is kept)."""
        if self._log_closed or self.log_path is None:
            return
        try:
            if self._log is None:
                self._log = _new_log(self.log_path)
            view = memoryview(data)
            while view:
                view = view[os.write(self._log, view) :]
        except OSError as exc:
            self._log_closed = True  # said once; the tail still reaches the ledger
            self._warn(
                f"{self.task} attempt {self.number}: cannot write its log {self.log_path} "
                f"({exc.strerror or exc}); the rest of its output is not kept there"
            )

    def read_usage(self) -> None:
        """What the attempt used: the usage file the worker wrote, else its
        client's own report. A file that cannot be read is a warning (in the
        log and on stderr), and the usage is then the client's, or unknown."""
        if self._reader is not None:
            report = self._reader.finish()
            self.usage, self._said = report.usage, report.text
        # No file there, the usual case, is the client's report: one look
        # rather than a failed read and its exceptions.
        if self.usage_path is None or not os.path.lexists(self.usage_path):
            return
        self.usage, message = attempt_usage(self.usage, self.usage_path, self.task, self.number)
        if message:
            self._warn(message)
            self._log_write(f"\n[gitrun: warning: {message}]\n".encode())

    def close_log(self) -> None:
        if self._log_closed:
            return
        self.read_usage()
        if self._dropped:
            note = f"\n[gitrun: {self._dropped} bytes dropped; the last ones follow]\n"
            self._log_write(note.encode() + bytes(self._tail))
        self._log_closed = True
        if self._log is not None:
            os.close(self._log)
            self._log = None

    def end(self) -> AttemptEnd:
        status = self.status if self.status is not None else 127
        if not (self.fault or self.failure or self.timed_out or self.stopped):
            # The shell's own words, not the client's readable text.
            said = exit_fault(
                self._client, status, bytes(self._tail[-4096:]).decode(errors="replace")
            )
            if said is not None:
                self.fault = f"environment fault: {self.task} attempt {self.number}: {said}"
        exited = self.exited_at or time.monotonic()
        return AttemptEnd(
            self.task,
            self.number,
            self.started,
            self.exited_wall or time.time(),
            status if status >= 0 else None,
            -status if status < 0 else None,
            self.timed_out,
            self.stopped,
            self.failure or self._tail_text(),
            self.fault,
            unstarted=self.failure or "",
            usage=self.usage,
            span=(self.began, exited),
        )

    def exited(self) -> None:
        """Note the moment the worker ended, on both clocks."""
        self.exited_at, self.exited_wall = time.monotonic(), time.time()

    def _tail_text(self) -> str:
        """The end of the output, or of the client's readable text where its
        output is JSON (claude's ``result``, codex's messages)."""
        if self._said is not None:
            return self._said[-4096:]
        return bytes(self._tail[-4096:]).decode(errors="replace")


class Monitor:
    """Starts attempts and reports the ones that ended."""

    def __init__(self, kill_grace: float = TERM_GRACE, warn: Warn = warn_stderr) -> None:
        self.kill_grace = kill_grace
        self.warn = warn
        self._selector = selectors.DefaultSelector()
        self._use_pidfd = hasattr(os, "pidfd_open")
        self._live: set[Attempt] = set()
        self._failed: list[Attempt] = []
        self._spawner = Spawner()
        self._launches = Launches()
        # Names in each directory of logs: listed at its first launch, then
        # every name launched since (None: it cannot be listed, so unlink each).
        self._present: dict[str, set[str] | None] = {}

    def launch(
        self,
        task: str,
        number: int,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        log_path: Path,
        timeout: float,
        confine: Sequence[str] = (),
    ) -> Attempt:
        """Start ``argv``; ``confine``: the command that runs it confined
        (gitrun.workers.sandbox), put before it."""
        usage_path = usage_file(log_path)
        attempt = Attempt(
            task, number, timeout, self.kill_grace, argv, usage_path, self.warn, log_path
        )
        attempt.confined = bool(confine)
        # An earlier attempt's, left by a run started over: its log is made
        # again only when this worker prints something.
        self._remove_stale(log_path, usage_path)
        env = {**env, USAGE_ENV: str(usage_path)}
        # The worker's stdout and stderr: one pipe, read here without a file
        # object around it.
        out, into = os.pipe()  # both close-on-exec: no other worker inherits them
        started = [*confine, *argv]
        # Unconfined, where the machine allows, the worker enters a cgroup of
        # its attempt's own before it runs (confined, its PID namespace ends
        # what it started).
        group = None if confine else self._group(started, env)
        began = boot_clock()
        try:
            proc = self._spawner.start(group.wrap(started) if group else started, cwd, env, into)
        except OSError as exc:
            os.close(out)
            if group is not None:
                group.end()
            attempt.failure = cannot_start(argv[0], exc)
            attempt._log_write(f"gitrun: cannot start the worker: {attempt.failure}\n".encode())
            attempt.close_log()
            attempt.status = 127
            attempt.exited()
            self._failed.append(attempt)
            return attempt
        except BaseException:
            os.close(out)
            if group is not None:
                group.end()
            raise
        finally:
            os.close(into)
        ended = boot_clock()
        attempt.proc, attempt.pid, attempt.out = proc, proc.pid, out
        if group is not None:
            attempt.group = group
            group.entered(proc.pid)  # the shell that entered it became the worker
        # The start returns once the child has exec'd, so this is the worker's
        # own command line (or nothing, when it already exited).
        program = (started[0], env.get("PATH"))
        recorded = self._launches.of(proc.pid, started, program, began, ended)
        attempt.create_time = recorded.get("create_time")
        attempt.cmdline = recorded.get("cmdline")
        os.set_blocking(out, False)
        self._selector.register(out, selectors.EVENT_READ, (attempt, "out"))
        if self._use_pidfd:
            try:
                pidfd = os.pidfd_open(proc.pid)
                self._selector.register(pidfd, selectors.EVENT_READ, (attempt, "exit"))
            except OSError:
                self._use_pidfd = False
        self._live.add(attempt)
        return attempt

    def _group(self, argv: list[str], env: dict[str, str]) -> AttemptGroup | None:
        """A cgroup of the attempt's own, where one can be had
        (gitrun.processes.cgroups) and the program is there to run (else its
        start fails as without: "not found" is said by the start, not by a shell)."""
        root, _why = cgroup_root()
        if root is None:
            return None
        program = argv[0]
        if "/" in program:
            if not os.access(program, os.X_OK):
                return None
        elif self._spawner.program(program, env.get("PATH")) is None:
            return None
        try:
            return AttemptGroup.make(root, env.get("GITRUN_ATTEMPT_ID", ""))
        except OSError:
            return None

    def _end_group(self, attempt: Attempt) -> None:
        if attempt.group is not None:
            attempt.group.end()
            attempt.group = None

    def _remove_stale(self, *paths: Path) -> None:
        """Remove what an earlier life left at ``paths`` (a log, a usage file).

        Each directory is listed once, at its first launch, instead of an
        unlink per file per launch (two failed syscalls per worker of a
        fresh run). Afterwards a file appears there only from an attempt
        this monitor launched, each remembered as it launches; what a worker
        of an earlier life would write after the listing it could as well
        have written after an unlink."""
        for path in paths:
            folder, name = os.path.split(path)
            present = self._present.get(folder, _UNLISTED)
            if present is _UNLISTED:
                present = self._present[folder] = _listing(folder)
            if present is None or name in present:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            if present is not None:
                present.add(name)  # the attempt launched now may make it

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
                self._read(attempt, key.fd)
            else:
                self._selector.unregister(key.fileobj)
                os.close(key.fd)
                self._reap(attempt)
        now = time.monotonic()
        for attempt in list(self._live):
            linger = attempt.linger_until
            if linger is not None and attempt.status is None and (attempt.eof or now >= linger):
                self._reap(attempt)
            elif attempt.status is None and not self._use_pidfd and linger is None:
                self._reap(attempt, block=False)
            if attempt.status is not None and (attempt.eof or now >= attempt.exited_at + EOF_GRACE):
                self._finish(attempt)
                ended.append(attempt.end())
        return ended

    @property
    def running(self) -> set[Attempt]:
        return set(self._live)

    def close(self) -> None:
        self._selector.close()
        self._spawner.close()
        for attempt in self._live:
            self._end_group(attempt)

    def _read(self, attempt: Attempt, fd: int) -> None:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                attempt.eof = True
                self._selector.unregister(fd)
                return
            attempt.take_output(chunk)

    def _reap(self, attempt: Attempt, block: bool = True) -> None:
        """Collect an exited worker (``block``: its pidfd said it exited).

        Whatever the worker left behind in its group goes with it, killed
        before the worker is reaped, while its pid still names the group.
        """
        assert attempt.proc is not None
        if not block and not has_exited(attempt.proc):
            return
        lingers = attempt.confined and not attempt.eof and attempt.linger_until is None
        if lingers and _killed(attempt.pid):  # not its worker's end: it may still shut down
            attempt.linger_until = time.monotonic() + attempt.kill_grace
            return  # see Attempt.confined
        attempt.signal_group(signal.SIGKILL)
        self._end_group(attempt)
        attempt.status = attempt.proc.wait()
        attempt.exited()

    def _finish(self, attempt: Attempt) -> None:
        self._live.discard(attempt)
        assert attempt.out is not None
        if not attempt.eof:  # a grandchild escaped the group and holds the pipe
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(attempt.out)
        os.close(attempt.out)
        attempt.out = None
        attempt.close_log()


_UNLISTED: set[str] = set()  # a directory not listed yet (compared by identity)


def _killed(pid: int) -> bool:
    """Whether the exited child ``pid`` was killed by a signal, asked without
    reaping it (its pid keeps naming its group)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return info is not None and info.si_code in (os.CLD_KILLED, os.CLD_DUMPED)


def cannot_start(program: str, exc: OSError) -> str:
    """Why ``program`` did not start, as a sentence's subject and clause."""
    shown = visible(program)
    if exc.errno == errno.ENOENT:
        where = "does not exist" if "/" in program else "not found on PATH"
        return f"`{shown}`: {where}"
    if exc.errno == errno.EACCES:
        return f"`{shown}`: not executable"
    return f"`{shown}`: {exc.strerror or exc}"


def _listing(folder: str) -> set[str] | None:
    """The names in ``folder`` (none when it does not exist), or None when
    it cannot be listed."""
    try:
        return set(os.listdir(folder or "."))
    except FileNotFoundError:
        return set()
    except OSError:
        return None


# Both know a client by its program (argv[0]) alone: asked once per program
# rather than once per attempt (a path parse each, on the driver's hot path).
@functools.cache
def _client_of(program: str) -> tuple[str, ClientSigns] | None:
    return client_signs([program])


@functools.cache
def _reports_usage(program: str) -> bool:
    return usage_reader([program]) is not None


def _new_log(path: Path) -> int:
    """Open a new file at ``path`` for an attempt's log. The logs folder is
    writable to confined workers (their usage files): whatever one left at
    a neighbour's log name (a link into the repository or out of it, a FIFO)
    is removed, never followed nor opened."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags, 0o666)
    except FileExistsError:
        os.unlink(path)
        return os.open(path, flags, 0o666)


def usage_file(log_path: Path) -> Path:
    """Where an attempt's worker may write its usage: beside its log
    (``logs/<task>.<attempt>.usage.json``), machine-local like the log."""
    return log_path.with_name(log_path.name.removesuffix(".log") + ".usage.json")
