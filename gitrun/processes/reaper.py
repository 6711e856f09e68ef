"""Signalling processes that a gitrun process recorded: only the ones it started.

A record (a worker's line in the running journal, a driver's owner record)
names a process by its pid, its create time and its command line, all read
right after it started. A later gitrun, possibly on a machine that has run
for weeks since, signals that process only when all three still match: a
pid alone is reused, and a record can be truncated or written by hand.

Content alone is not proof, though: workers can write ``.git/``, so a worker
can forge a journal record naming any process of the same user, copying its
pid, create time and command line. Every signal derived from a journal record
therefore also needs the process to carry the attempt's identity in its
initial environment block: ``GITRUN_ATTEMPT_ID`` (a fresh random id the driver
gives each attempt and writes into its record as ``attempt_id``) with the
attempt's ``GITRUN_RUN``, ``GITRUN_TASK`` and ``GITRUN_ATTEMPT``. A process
gitrun did not start cannot carry a uuid it was never given, and a record
without ``attempt_id`` never leads to a signal. (A driver's owner record is
proved differently: see :mod:`gitrun.commands.watchdog`.)

Never signalled, whatever a record says: pid 0, 1 or below (``kill(0)`` and
``kill(-n)`` mean whole groups, 1 is init), gitrun's own pid, group or
session, and anything named by a partial or ill-typed record.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import signal
import sys
import time
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    import psutil


def _lazy(name: str) -> ModuleType:
    """The module ``name``, executed on first use (the recipe of
    :class:`importlib.util.LazyLoader`)."""
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.loader is not None, name
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


if not TYPE_CHECKING:
    # deferred: psutil takes ~25 ms to import, and `status` (<= 25x `python -c pass`)
    # imports this module; only a kill, or a machine without /proc, uses it.
    psutil = sys.modules.get("psutil") or _lazy("psutil")

CREATE_TIME_SLACK = 0.05  # seconds; psutil derives create times from clock ticks
GONE_PATIENCE = 5.0  # seconds to wait for a killed group to go
CMDLINE_PATIENCE = 1.0  # seconds to wait for a just-exec'd command line to show


def identity(pid: int) -> dict[str, Any]:
    """``create_time`` and ``cmdline`` of a process, for a record; ``{}``
    when they cannot be read (it is gone, or already a zombie).

    Right after a child's exec the kernel installs the new program before
    its arguments, so for a moment the command line reads empty: wait for it
    (briefly; a process never shows an empty one once it runs).

    Both are read as psutil reads them (:func:`start_time`, :func:`_cmdline`),
    so a record matches what :func:`is_recorded_process` sees later, from two
    small reads of ``/proc`` instead of psutil's five.
    """
    if not HAS_PROC:  # pragma: no cover - macOS and the BSDs
        return _identity_psutil(pid)
    deadline = time.monotonic() + CMDLINE_PATIENCE
    while True:
        found = _proc_stat(pid)
        if found is None or found[0] == "Z":
            return {}
        cmdline = _cmdline(pid)
        if cmdline is None:
            return {}
        if cmdline:
            return {"create_time": found[1], "cmdline": cmdline}
        if time.monotonic() > deadline:
            return {}
        time.sleep(0.0005)


def start_time(pid: int) -> float | None:
    """When ``pid`` started, in seconds since the epoch, or None when it is
    gone: psutil's ``create_time`` to the bit (the start in clock ticks since
    boot, over the ticks per second, plus the boot time) on Linux, psutil's
    own elsewhere. The one reading of a start time that records and the checks
    of records share: a pid reused by a later process has another."""
    if not HAS_PROC:  # pragma: no cover - macOS and the BSDs
        try:
            return float(psutil.Process(pid).create_time())
        except psutil.Error:
            return None
    found = _proc_stat(pid)
    return None if found is None else found[1]


HAS_PROC = os.path.exists("/proc/self/stat")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if HAS_PROC else 100
BOOT_TIME_REUSE = 10.0  # seconds one reading of the boot time serves
_boot: tuple[float, float] = (-math.inf, 0.0)  # (monotonic time read, boot time)


def _boot_time() -> float:
    """The boot time as ``/proc/stat`` gives it (psutil's ``boot_time``),
    read again every :data:`BOOT_TIME_REUSE` seconds: the file is big on a
    machine with many CPUs, and the value moves only when the clock is set."""
    global _boot
    now = time.monotonic()
    if now - _boot[0] < BOOT_TIME_REUSE:
        return _boot[1]
    with open("/proc/stat", "rb") as handle:
        for line in handle:
            if line.startswith(b"btime"):
                _boot = (now, float(line.split()[1]))
                return _boot[1]
    raise OSError("/proc/stat has no btime line")  # pragma: no cover - every Linux has one


def _proc_stat(pid: int) -> tuple[str, float] | None:
    """(state letter, start time) of ``pid`` from ``/proc/<pid>/stat``, as
    psutil parses it (the name may hold spaces and parentheses); None when gone."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    fields = data[data.rfind(b")") + 2 :].split()
    if len(fields) < 20:
        return None
    return fields[0].decode(), float(fields[19]) / _CLOCK_TICKS + _boot_time()


def _cmdline(pid: int) -> list[str] | None:
    """The command line of ``pid`` exactly as psutil gives it (with its rules
    for processes that rewrote their arguments); None when it is gone."""
    data = _read_proc_text(pid, "cmdline")
    if not data:
        return None if data is None else []
    return _split_cmdline(data)


def _split_cmdline(data: str) -> list[str]:
    """psutil's reading of a non-empty ``/proc/<pid>/cmdline``."""
    sep = "\x00" if data.endswith("\x00") else " "
    if data.endswith(sep):
        data = data[:-1]
    cmdline = data.split(sep)
    if sep == "\x00" and len(cmdline) == 1 and " " in data:
        cmdline = data.split(" ")
    return cmdline


def _environ(pid: int) -> dict[str, str] | None:
    """The initial environment block of ``pid`` exactly as psutil gives it
    (``parse_environ_block``: up to the first empty entry, entries without a
    name skipped, a later one winning); None when it cannot be read (gone,
    or another user's)."""
    if not HAS_PROC:  # pragma: no cover - macOS and the BSDs
        try:
            return dict(psutil.Process(pid).environ())
        except psutil.Error:
            return None
    data = _read_proc_text(pid, "environ")
    if data is None:
        return None
    found: dict[str, str] = {}
    pos = 0
    while True:
        end = data.find("\0", pos)
        if end <= pos:
            return found
        equals = data.find("=", pos, end)
        if equals > pos:
            found[data[pos:equals]] = data[equals + 1 : end]
        pos = end + 1


def _read_proc_text(pid: int, name: str) -> str | None:
    """``/proc/<pid>/<name>`` read as psutil reads it: decoded as file names
    are, newlines translated as a text-mode read does; None when unreadable."""
    try:
        fd = os.open(f"/proc/{pid}/{name}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return _as_text(b"".join(chunks))


def _as_text(data: bytes) -> str:
    """Bytes of ``/proc`` as psutil reads them: decoded as file names are,
    newlines translated as a text-mode read does."""
    text = data.decode(sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


# Where /proc gives a start time in clock ticks of a whole number of nanoseconds.
_TICK_NS = 1_000_000_000 // _CLOCK_TICKS if 1_000_000_000 % _CLOCK_TICKS == 0 else 0
_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)


def boot_clock() -> int:
    """Nanoseconds on the clock ``/proc`` dates a process's start by (since
    boot, suspend included); 0 where there is none."""
    return time.clock_gettime_ns(_BOOTTIME) if HAS_PROC and _BOOTTIME is not None else 0


class Launches:
    """:func:`identity` of the workers one launcher starts, without reading
    ``/proc`` where the launch already knows the answer (the reads cost a
    driver ~50 us of CPU per worker, and a worker caught mid-exec a 0.5 ms wait).

    The kernel stamps a child with the boot clock when it is created, inside
    the start call: a start bracketed by two readings of that clock
    (:func:`boot_clock`) within one clock tick started in that tick, which is
    what ``/proc`` reports. A program the kernel runs as it is (not a ``#!``
    script, whose interpreter comes first) shows the argv it was given. Both
    are proved on this machine before they are relied on: the first start of
    each program reads ``/proc`` as :func:`identity` does, and the shortcut
    serves that program only when the two agree, the clock for every program
    once it agreed (never again after any disagreement). Otherwise
    :func:`identity` reads ``/proc``; a start that spanned a tick reads only
    its start time there.
    """

    def __init__(self) -> None:
        self._clock: bool | None = None  # the tick of a start is /proc's; None: unproved
        self._plain: dict[tuple[str, str | None], bool] = {}  # a program shows its argv

    def of(
        self, pid: int, argv: list[str], program: tuple[str, str | None], began: int, ended: int
    ) -> dict[str, Any]:
        """The identity of worker ``pid``, started from ``argv`` (``program``:
        its name and the PATH it was found on) between the boot clock
        readings ``began`` and ``ended``."""
        tick = began // _TICK_NS if began and _TICK_NS else -1
        exact = tick >= 0 and ended // _TICK_NS == tick
        if self._clock and self._plain.get(program):
            if exact:
                created = self._create_time(tick)
            else:  # the start spanned a tick: /proc says which (its command line is known)
                stat = _proc_stat(pid)
                if stat is None or stat[0] == "Z":
                    return {}
                created = stat[1]
            return {"create_time": created, "cmdline": _argv_cmdline(argv)}
        found = identity(pid)
        if found and exact:
            if self._clock is not False:
                self._clock = found["create_time"] == self._create_time(tick)
            if program not in self._plain:
                self._plain[program] = found["cmdline"] == _argv_cmdline(argv)
        return found

    @staticmethod
    def _create_time(tick: int) -> float:
        """:func:`_proc_stat`'s start time for a start in ``tick``, to the bit."""
        return float(tick) / _CLOCK_TICKS + _boot_time()


def _argv_cmdline(argv: list[str]) -> list[str]:
    """The command line psutil reads of a program started with ``argv`` that
    shows it as it was given (``/proc`` holds each argument and a NUL)."""
    if (len(argv) > 1 or " " not in argv[0]) and not any("\r" in arg for arg in argv):
        return list(argv)  # what the reading below gives back for every usual argv
    return _split_cmdline(_as_text(b"".join(os.fsencode(arg) + b"\0" for arg in argv)))


def _identity_psutil(pid: int) -> dict[str, Any]:  # pragma: no cover - macOS and the BSDs
    deadline = time.monotonic() + CMDLINE_PATIENCE
    try:
        proc = psutil.Process(pid)
        while True:
            cmdline = proc.cmdline()
            if cmdline or time.monotonic() > deadline:
                break
            time.sleep(0.001)
        if not cmdline:
            return {}
        return {"create_time": proc.create_time(), "cmdline": cmdline}
    except psutil.Error:
        return {}


def openers(path: Path | str) -> set[int] | None:
    """The pids of the processes that hold ``path`` open now (this one left
    out), as far as ``/proc`` lets this user see; None where there is no
    ``/proc``. Git holds its lock files (``index.lock``) open for as long
    as it writes them, so this names a live git at work, where the file's
    existence alone cannot tell a live one from a dead one."""
    if not HAS_PROC:  # pragma: no cover - macOS and the BSDs
        return None
    try:
        st = os.lstat(path)
    except OSError:
        return set()
    want, name = (st.st_dev, st.st_ino), os.path.basename(path)
    found: set[int] = set()
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        fds = f"/proc/{entry}/fd"
        try:
            listed = os.listdir(fds)
        except OSError:
            continue  # gone, or another user's
        for fd in listed:
            try:
                if not os.readlink(f"{fds}/{fd}").endswith(name):
                    continue
                held = os.stat(f"{fds}/{fd}")
            except OSError:
                continue
            if (held.st_dev, held.st_ino) == want:
                found.add(int(entry))
                break
    return found


def may_signal(pid: object) -> bool:
    """Whether ``pid`` is a value gitrun may ever signal: an int above 1 that
    is neither this process nor its group nor its session."""
    if type(pid) is not int or pid <= 1 or pid == os.getpid():
        return False
    with contextlib.suppress(OSError):
        if pid in (os.getpgid(0), os.getsid(0)):
            return False
    return True


def _worker_record(record: Mapping[str, Any]) -> tuple[int, float, dict[str, str]] | None:
    """pid, create time and attempt environment of a complete worker record."""
    fields = _recorded(record)
    env = attempt_env(record)
    if fields is None or env is None:
        return None
    return fields[0], fields[1], env


def _recorded(record: Mapping[str, Any]) -> tuple[int, float, list[str]] | None:
    """pid, create time and command line of a complete, well-typed record."""
    pid, created, cmdline = record.get("pid"), record.get("create_time"), record.get("cmdline")
    if not may_signal(pid):
        return None
    assert isinstance(pid, int)
    if isinstance(created, bool) or not isinstance(created, int | float):
        return None
    if not math.isfinite(created):
        return None
    if not isinstance(cmdline, list) or not cmdline:
        return None
    if not all(isinstance(arg, str) for arg in cmdline):
        return None
    return pid, float(created), cmdline


def attempt_env(record: Mapping[str, Any]) -> dict[str, str] | None:
    """The ``GITRUN_*`` variables an attempt's processes carry, from its
    journal record; None when the record lacks any of them (above all its
    ``attempt_id``): such a record can never prove a process is the attempt's."""
    run, task, attempt = record.get("run"), record.get("task"), record.get("attempt")
    attempt_id = record.get("attempt_id")
    if not (isinstance(run, str) and isinstance(task, str) and type(attempt) is int):
        return None
    if not isinstance(attempt_id, str) or not attempt_id:
        return None
    return {
        "GITRUN_RUN": run,
        "GITRUN_TASK": task,
        "GITRUN_ATTEMPT": str(attempt),
        "GITRUN_ATTEMPT_ID": attempt_id,
    }


def kill_attempt_processes(record: Mapping[str, Any]) -> bool:
    """Kill the processes of an attempt that was about to start when its
    driver died, so no pid was recorded: the write-ahead record holds the
    attempt id every process of the attempt inherits (``GITRUN_ATTEMPT_ID``,
    unique per attempt) and when it was written. A process is killed only if
    it carries that id, with this run, task and attempt, and started after the
    record; a group it leads goes with it. Whether anything was killed."""
    env = attempt_env(record)
    written = record.get("started")
    if env is None:
        return False
    if isinstance(written, bool) or not isinstance(written, int | float):
        return False
    if not math.isfinite(written):
        return False
    killed = False
    deadline = time.monotonic() + GONE_PATIENCE
    while time.monotonic() < deadline:
        ours = [
            p
            for p in psutil.process_iter()
            if may_signal(p.pid) and _is_attempt_member(p, float(written), env)
        ]
        if not ours:
            break
        for proc in ours:
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(proc.pid) == proc.pid:
                    os.killpg(proc.pid, signal.SIGKILL)  # it leads its group: the worker
                else:
                    proc.kill()
                killed = True
        time.sleep(0.02)
    return killed


def _carries(proc: Any, env: Mapping[str, str]) -> bool:
    """Whether a process's initial environment block holds every one of ``env``."""
    if not env.get("GITRUN_ATTEMPT_ID"):
        return False  # never on run, task and attempt number alone: anyone can set those
    found = _environ(proc.pid)
    return found is not None and all(found.get(key) == value for key, value in env.items())


def _same_start(proc: Any, created: float) -> bool:
    """Whether ``proc`` started when a record says (read as the record was made)."""
    started = start_time(proc.pid)
    return started is not None and abs(started - created) <= CREATE_TIME_SLACK


def is_recorded_process(record: Mapping[str, Any]) -> bool:
    """Whether the process a record names runs now and is the one recorded:
    same pid, same create time, same command line. Enough for a driver's
    owner record only together with proof that the pid holds the run's lock
    (:mod:`gitrun.commands.watchdog`); a worker needs :func:`is_recorded_worker`."""
    fields = _recorded(record)
    if fields is None:
        return False
    pid, created, cmdline = fields
    proc = _live_since(pid, created)
    try:
        return proc is not None and bool(proc.cmdline() == cmdline)
    except psutil.Error:
        return False


def is_recorded_worker(record: Mapping[str, Any]) -> bool:
    """Whether the worker a journal record names runs now and is provably
    that attempt's: same pid and create time as recorded, and the attempt's
    ``GITRUN_ATTEMPT_ID``, run, task and attempt number in its environment
    (:func:`attempt_env`). The recorded command line must be complete, but
    the live one may differ: a worker that replaced its program with ``exec``
    (``sh -c 'exec agent ...'``; a shell does this by itself for its last
    command) keeps its pid, create time and environment, not its command line.
    """
    found = _worker_record(record)
    if found is None:
        return False
    pid, created, env = found
    proc = _live_since(pid, created)
    return proc is not None and _carries(proc, env)


def _live_since(pid: int, created: float) -> Any:
    """The process ``pid`` (a ``psutil.Process``) when it runs, is not a
    zombie, and started when recorded; else None (the pid was reused, or it
    is gone)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE or not _same_start(proc, created):
            return None
        return proc
    except psutil.Error:
        return None


def signal_recorded_process(record: Mapping[str, Any], sig: int) -> bool:
    """Send ``sig`` to the process an owner record names, if it is verifiably
    that process (:func:`is_recorded_process`); and to its whole group when it
    leads one that is not gitrun's own. Whether it was signalled. The caller
    proves the record itself (a driver's: it holds the run's lock)."""
    if not is_recorded_process(record):
        return False
    pid = record["pid"]
    try:
        if os.getpgid(pid) == pid and may_signal(pid):
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def kill_recorded_group(record: Mapping[str, Any]) -> bool:
    """SIGKILL the process group of an attempt that a dead driver recorded,
    when it is provably the group that driver started; whether anything was
    signalled. Waits up to :data:`GONE_PATIENCE` for the group to go.

    The worker was started as the leader of its own session and group, so its
    group id is its pid. Two cases:

    - The leader runs and is the attempt's worker (:func:`is_recorded_worker`:
      pid, create time, and this attempt's ``GITRUN_ATTEMPT_ID`` in its
      environment): the group is the worker's, ``killpg``.
    - The leader is gone, or a zombie nobody reaped (its environment can no
      longer be read). The group may still hold the worker's children, but
      the group id alone proves nothing (it could have been reused, or the
      record forged), so the group is never signalled as a whole here: each
      member is killed on its own, and only if it started after the worker
      and carries this very attempt's ``GITRUN_ATTEMPT_ID`` (with its run,
      task and attempt number) in its environment. A member that cleared its
      environment is left alone, and the stray-write audit still reports what
      it writes.

    A record without a pid above 1, a create time, a command line and an
    ``attempt_id`` never leads to a signal, nor does one naming gitrun itself
    or its own group.
    """
    found = _worker_record(record)
    if found is None:
        return False
    pid, created, env = found
    try:
        leader = psutil.Process(pid)
        zombie = leader.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return _kill_members(pid, created, env)
    except psutil.Error:
        return False
    if not _same_start(leader, created):
        return False  # the pid now belongs to another process, and so does the group
    if zombie:
        return _kill_members(pid, created, env)
    if not is_recorded_worker(record):
        return False
    try:
        if os.getpgid(pid) != pid:
            return False
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    deadline = time.monotonic() + GONE_PATIENCE
    while time.monotonic() < deadline:
        if not any(is_running(p.pid) for p in group_members(pid)):
            break
        time.sleep(0.02)
    return True


def _kill_members(pgid: int, created: float, env: Mapping[str, str]) -> bool:
    """Kill, one by one, the members of a leaderless group that prove to be the attempt's."""
    if not env.get("GITRUN_ATTEMPT_ID"):
        return False
    killed = False
    deadline = time.monotonic() + GONE_PATIENCE
    while time.monotonic() < deadline:
        ours = [p for p in group_members(pgid) if _is_attempt_member(p, created, env)]
        if not ours:
            break
        for proc in ours:
            with contextlib.suppress(psutil.Error):
                proc.kill()  # psutil checks the pid was not reused since it looked
                killed = True
        time.sleep(0.02)
    return killed


def _is_attempt_member(proc: Any, created: float, env: Mapping[str, str]) -> bool:
    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        started = start_time(proc.pid)
        return (
            started is not None and started >= created - CREATE_TIME_SLACK and _carries(proc, env)
        )
    except psutil.Error:
        return False


def group_members(pgid: int) -> list[Any]:
    """The processes (``psutil.Process``) whose process group is ``pgid``."""
    members = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) == pgid:
                members.append(proc)
    return members


def is_running(pid: int) -> bool:
    """Whether ``pid`` runs: not gone, and not a zombie nobody reaped yet (a
    container's init may never reap the orphans it inherits)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def kill_leftovers(run_id: str, attempt_ids: set[str]) -> list[int]:
    """Kill the processes that carry the id of one of these attempts (which
    all ended): children a worker left behind in a session of their own
    (``setsid``), out of reach of the kill of its process group. Only a
    process whose initial environment names this run and one of these fresh
    ids is touched, and only while its pid still names the process whose
    environment was read (its start time, read before and after, is the
    same). Returns the pids killed."""
    if not attempt_ids:
        return []
    if not HAS_PROC:  # pragma: no cover - macOS and the BSDs
        return _kill_leftovers_psutil(run_id, attempt_ids)

    def ours(pid: int) -> bool:
        found = _environ(pid)
        return (
            found is not None
            and found.get("GITRUN_RUN") == run_id
            and found.get("GITRUN_ATTEMPT_ID") in attempt_ids
        )

    killed: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or not may_signal(int(name)):
            continue
        pid = int(name)
        if not ours(pid):  # the usual answer, from one read
            continue
        started = start_time(pid)
        if started is None or not ours(pid) or start_time(pid) != started:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


def _kill_leftovers_psutil(
    run_id: str, attempt_ids: set[str]
) -> list[int]:  # pragma: no cover - macOS and the BSDs
    killed: list[int] = []
    for proc in psutil.process_iter():
        if not may_signal(proc.pid):
            continue
        try:
            found = proc.environ()
        except (psutil.Error, OSError):
            continue
        if found.get("GITRUN_RUN") != run_id or found.get("GITRUN_ATTEMPT_ID") not in attempt_ids:
            continue
        with contextlib.suppress(psutil.Error):
            proc.kill()  # psutil checks the pid still names the process it looked at
            killed.append(proc.pid)
    return killed
