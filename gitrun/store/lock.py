"""One driver per run: a file lock with an owner record.

The lock is an ``flock`` (:mod:`gitrun.store.flocks`), which the kernel releases when
its holder dies, also by ``kill -9``: a lock left by a dead process is simply
taken over, with no manual unlock step. The owner record next to it says who
holds it (pid, host, start, heartbeat) so a refused second driver can name it,
and who exactly that process is (its create time and command line), so that
``gitrun watchdog --kill`` signals it only while it is still that process.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitrun.errors import GitrunError
from gitrun.processes.reaper import identity, is_running
from gitrun.store.flocks import (  # flock itself: filelock imports asyncio (~45 ms)
    Held,
    hold,
    is_held,
)
from gitrun.store.local import LocalPaths
from gitrun.store.records import (
    VERSION,
    Fields,
    RecordDamaged,
    is_finite,
    load_record,
    warn_stderr,
    write_record,
)
from gitrun.store.regular import NotRegular


@dataclass(frozen=True)
class LiveAttempt:
    task: str
    attempt: int
    started: float
    deadline: float


@dataclass(frozen=True)
class LiveState:
    """What a live driver is doing, written with every heartbeat: ``status``
    shows it, ``watchdog`` finds attempts past their deadline in it. Read
    leniently: it only informs, so a damaged field reads as absent."""

    concurrency: int | None = None
    max_concurrency: int | None = None
    kill_grace: float | None = None
    backoff_until: float | None = None
    waiting_for_load: bool = False
    canary: list[str] = field(default_factory=list)
    halt: str | None = None  # the halt's message
    running: list[LiveAttempt] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "max_concurrency": self.max_concurrency,
            "kill_grace": self.kill_grace,
            "backoff_until": self.backoff_until,
            "waiting_for_load": self.waiting_for_load,
            "canary": self.canary,
            "halt": self.halt,
            "running": [vars(a) for a in self.running],
        }

    @classmethod
    def from_json(cls, data: object) -> LiveState:
        if not isinstance(data, dict):
            return cls()
        running = []
        for item in data.get("running") or []:
            if not isinstance(item, dict):
                continue
            task, attempt = item.get("task"), item.get("attempt")
            started, deadline = item.get("started"), item.get("deadline")
            if isinstance(task, str) and type(attempt) is int and is_finite(deadline):
                begun = float(started) if is_finite(started) else 0.0  # type: ignore[arg-type]  # is_finite checked it
                running.append(LiveAttempt(task, attempt, begun, float(deadline)))  # type: ignore[arg-type]
        canary, halt = data.get("canary"), data.get("halt")
        return cls(
            _whole(data.get("concurrency")),
            _whole(data.get("max_concurrency")),
            _number(data.get("kill_grace")),
            _number(data.get("backoff_until")),
            data.get("waiting_for_load") is True,
            [c for c in canary if isinstance(c, str)] if isinstance(canary, list) else [],
            halt if isinstance(halt, str) else None,
            running,
        )


def _whole(value: object) -> int | None:
    return value if type(value) is int else None


def _number(value: object) -> float | None:
    return float(value) if is_finite(value) else None  # type: ignore[arg-type]  # is_finite checked it


@dataclass(frozen=True)
class Owner:
    pid: int
    host: str
    started: float
    heartbeat: float
    state: LiveState = field(default_factory=LiveState)  # the driver's live state
    create_time: float | None = None  # as psutil reports it, for reaper.is_recorded_process
    cmdline: list[str] | None = None

    # Ages of another process's record: on the wall clock, the one clock two
    # processes (or machines) share; a monotonic one is per boot.
    @property
    def age(self) -> float:
        return time.time() - self.started

    @property
    def silence(self) -> float:
        return time.time() - self.heartbeat

    def to_json(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "pid": self.pid,
            "host": self.host,
            "started": self.started,
            "heartbeat": self.heartbeat,
            "create_time": self.create_time,
            "cmdline": self.cmdline,
            "state": self.state.to_json(),
        }

    @classmethod
    def from_json(cls, data: Fields) -> Owner:
        """Who the record names must be well-typed; what only informs (the live
        state, the process identity) is read as absent when it is not."""
        state, created, cmdline = (data.data.get(k) for k in ("state", "create_time", "cmdline"))
        return cls(
            data.integer("pid"),
            data.string("host"),
            data.number("started"),
            data.number("heartbeat"),
            LiveState.from_json(state),
            create_time=float(created) if isinstance(created, int | float) else None,
            cmdline=cmdline
            if isinstance(cmdline, list) and all(isinstance(a, str) for a in cmdline)
            else None,
        )


class RunBusy(GitrunError):
    def __init__(self, run_id: str, owner: Owner | None, damage: str = "") -> None:
        self.owner = owner
        if owner is not None:
            who = (
                f"pid {owner.pid} on host {owner.host} (started {_ago(owner.age)} ago, "
                f"last heartbeat {_ago(owner.silence)} ago)"
            )
        elif damage:
            who = f"another gitrun process (its owner record {damage})"
        else:
            who = "another gitrun process"
        super().__init__(
            f"run {run_id!r} is already being driven by {who}; wait for it to finish or stop it "
            f"(Ctrl-C in its terminal, or `gitrun stop {run_id}`), then `gitrun resume "
            f"{run_id}`"
        )


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class LocalStateUnwritable(GitrunError):
    """gitrun cannot write its machine-local state (a full disk, a read-only one)."""

    def __init__(self, path: Path, exc: OSError) -> None:
        self.path = path
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            fix = "free space on that disk (or raise your quota), then run the command again"
        elif exc.errno == errno.EROFS:
            fix = "the file system is read-only; run gitrun from a writable clone"
        else:
            fix = "make that directory writable for you, then run the command again"
        super().__init__(f"cannot write {path}: {exc.strerror or exc}; {fix}")


def read_owner(local: LocalPaths) -> Owner | None:
    """The owner record of the run's driver; None when there is none.

    It is read while a live process holds the lock (a dead driver's record
    says nothing), so a record that cannot be read is reported, never guessed
    at: :class:`gitrun.store.records.RecordDamaged` names the file and the fix.
    """
    run = local.root.name
    return load_record(
        local.owner,
        Owner.from_json,
        what="owner record of the run's driver",
        fix=(
            f"the driver of run {run!r} rewrites it every few seconds, so if this stays, that "
            "driver is another gitrun version or the file is being damaged: use the gitrun that "
            f"started the run, or stop that driver and run `gitrun resume {run}`"
        ),
    )


def _live_owner(local: LocalPaths, patience: float = 2.0) -> tuple[Owner | None, str]:
    """The owner record of the lock's live holder, or (None, why it cannot be read).

    The holder writes its record just after taking the lock, so a record
    naming a dead process is the previous holder's: wait for the new one.
    """
    deadline = time.monotonic() + patience
    while True:
        try:
            owner, damage = read_owner(local), ""
        except RecordDamaged as exc:
            owner, damage = None, f"{exc.path} {exc.problem}"
        if owner is not None and (owner.host != _hostname() or is_running(owner.pid)):
            return owner, ""
        if time.monotonic() >= deadline:
            return owner, damage
        time.sleep(0.05)


class RunLock:
    """The held lock; ``beat()`` refreshes the heartbeat in the owner record.

    The first write of the record must succeed (:class:`LocalStateUnwritable`
    otherwise: nothing has started yet). A later heartbeat that cannot be
    written (the disk filled up) only warns, once, and is tried again at the
    next beat: the lock itself is held by the kernel, the record only informs.
    """

    def __init__(self, local: LocalPaths, warn: Callable[[str], None] = warn_stderr) -> None:
        self.local = local
        self.warn = warn
        me = identity(os.getpid())
        self.owner = Owner(
            os.getpid(),
            _hostname(),
            time.time(),
            time.time(),
            create_time=me.get("create_time"),
            cmdline=me.get("cmdline"),
        )
        self._written = False
        self._failing = False

    def beat(self, state: LiveState | None = None) -> None:
        self.owner = Owner(
            self.owner.pid,
            self.owner.host,
            self.owner.started,
            time.time(),
            state if state is not None else self.owner.state,
            self.owner.create_time,
            self.owner.cmdline,
        )
        try:
            write_record(self.local.owner, self.owner)
        except OSError as exc:
            if not self._written:
                raise LocalStateUnwritable(self.local.owner, exc) from None
            if not self._failing:
                self.warn(
                    f"cannot write the heartbeat to {self.local.owner}: {exc.strerror or exc}; "
                    "the run goes on and tries again every beat (free space on that disk)"
                )
            self._failing = True
            return
        if self._failing:
            self.warn(f"{self.local.owner}: heartbeats written again")
        self._written, self._failing = True, False


PROBE_PATIENCE = 0.2  # seconds a start waits for the lock when it is only being probed


@contextmanager
def run_locked(local: LocalPaths, run_id: str) -> Iterator[RunLock]:
    """Hold the run's driver lock, or raise RunBusy naming its holder."""
    with ExitStack() as lock:
        try:
            local.root.mkdir(parents=True, exist_ok=True)
            # is_locked (status, the watchdog) takes the lock for an instant to
            # see whether it is free: a start at that instant waits it out.
            deadline = time.monotonic() + PROBE_PATIENCE
            while True:
                try:
                    lock.enter_context(hold(local.lock, wait=False))
                    break
                except Held:
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(0.005)
        except Held:
            raise RunBusy(run_id, *_live_owner(local)) from None
        except NotRegular:
            raise  # a directory or a device where the lock belongs: said as such
        except OSError as exc:
            raise LocalStateUnwritable(Path(exc.filename or local.lock), exc) from None
        held = RunLock(local)
        try:
            held.beat()
            yield held
        finally:
            with suppress(IsADirectoryError):  # said by the write that met it, never removed
                local.owner.unlink(missing_ok=True)


def is_locked(local: LocalPaths) -> bool:
    """Whether a live process holds the run's driver lock right now."""
    return is_held(local.lock)


PROC_LOCKS = Path("/proc/locks")


def lock_damage(local: LocalPaths) -> str:
    """Why the run's lock file is not one gitrun can trust ("" when it is sound
    or absent): it must be a regular file with one link, in a real directory
    ``.git/gitrun/<run>/``.

    A symlink or a hard link makes the kernel's lock table name whatever
    process holds a lock on the file it shares an inode with, anywhere on the
    machine, so no signal may rest on such a lock.
    """
    for directory in (local.root.parent, local.root):
        try:
            st = os.lstat(directory)
        except FileNotFoundError:
            return ""  # nothing of this run's local state exists yet
        except OSError as exc:
            return f"cannot read {directory}: {exc.strerror or exc}"
        if not stat.S_ISDIR(st.st_mode):
            what = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a directory"
            return f"{directory} is {what}"
    try:
        st = os.lstat(local.lock)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"cannot read {local.lock}: {exc.strerror or exc}"
    if stat.S_ISLNK(st.st_mode):
        return f"the run lock {local.lock} is a symlink"
    if not stat.S_ISREG(st.st_mode):
        return f"the run lock {local.lock} is not a regular file"
    if st.st_nlink != 1:
        return (
            f"the run lock {local.lock} has {st.st_nlink} links (it is hard-linked to a file "
            "elsewhere)"
        )
    return ""


def lock_holders(lock: Path, table: Path | None = None) -> set[int] | None:
    """The pids the kernel lists as holding an ``flock`` on the file ``lock``;
    None when this system has no such table (``/proc/locks`` is Linux's).

    A line of ``/proc/locks`` reads ``1: FLOCK  ADVISORY  WRITE 4242 fe:00:2146505 0 EOF``:
    the pid that took the lock, then the device (major and minor in hex) and
    inode of the locked file. Waiters (lines with ``->``) hold nothing. This
    is the kernel's word, which no file a worker can write can forge: it is
    how ``gitrun watchdog --kill`` proves that an owner record names the
    process that really holds the run.
    """
    try:
        text = (table or PROC_LOCKS).read_text()
    except OSError:
        return None  # no such table here (not Linux), or it cannot be read: no proof
    try:
        st = os.lstat(lock)  # a symlink's own inode, which no flock names
    except OSError:
        return set()
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    holders: set[int] = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 6 or fields[1] == "->" or fields[1] != "FLOCK":
            continue
        try:
            pid = int(fields[4])
            major, minor, inode = fields[5].split(":")
            found = (int(major, 16), int(minor, 16), int(inode))
        except ValueError:
            continue
        if found == want:
            holders.add(pid)
    return holders


def _hostname() -> str:
    return socket.gethostname()
