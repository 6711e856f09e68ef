"""Starting a worker process: the leader of a session of its own, its output
into a pipe, at the least cost per start.

A fan-out starts a worker per task from the driver's one thread, so a start
is on its critical path. Two things make it cheaper than a plain
``subprocess.Popen``: the program is looked up on PATH once per run (not by
every start, and by every worker trying each directory before the right
one), and where nothing would differ, the worker is started with
``posix_spawn``, which does in C what Popen does in Python (about half the
driver's cost of a start). Nothing differs when the worker's directory is
the driver's own (posix_spawn cannot change it), once the descriptors gitrun
was started with beyond stdin, stdout and stderr are close-on-exec, as
gitrun's own always are (Popen closes them in each child; the spawner marks
them once, which changes nothing else: every other child gitrun starts
closes them anyway). Otherwise, Popen as before.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Protocol

# What Popen resets in a child besides what exec resets by itself: Python
# ignores these at start-up, and an ignored signal stays ignored across exec.
# (glibc's posix_spawn also leaves its two internal signals, 32 and 33, ignored
# in the child, as in CPython's own posix_spawn path: glibc keeps them for
# itself, and its SIGRTMIN is 34.)
_DEFAULT_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, name)
)


class Process(Protocol):
    """A started worker, as the runner uses it (a Popen, or a :class:`Child`)."""

    pid: int

    def wait(self) -> int: ...

    def poll(self) -> int | None: ...


class Child:
    """A worker ``posix_spawn`` started: its pid, and its status once reaped
    (Popen's convention: the exit status, or minus the signal that ended it)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def wait(self) -> int:
        if self.returncode is None:
            _pid, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


class Spawner:
    """Starts workers; holds what one start leaves for the next (/dev/null
    open, the programs found on PATH)."""

    def __init__(self) -> None:
        self._devnull: int | None = None
        self._programs: dict[tuple[str, str | None], str] = {}
        self._posix_spawn = hasattr(os, "posix_spawn") and _close_on_exec_beyond_stdio()

    def close(self) -> None:
        if self._devnull is not None:
            os.close(self._devnull)
            self._devnull = None

    def start(self, argv: list[str], cwd: Path, env: dict[str, str], output: int) -> Process:
        """Start ``argv`` in ``cwd`` as the leader of a new session and process
        group, its stdin /dev/null, its stdout and stderr ``output``."""
        if self._devnull is None:
            self._devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        path = env.get("PATH")
        executable = self._program(argv[0], path)
        try:
            return self._start(argv, executable, cwd, env, output)
        except OSError:
            if executable is None:
                raise
        # The program found earlier is gone or changed: Popen searches PATH.
        self._programs.pop((argv[0], path), None)
        return self._popen(argv, None, cwd, env, output)

    def _start(
        self, argv: list[str], executable: str | None, cwd: Path, env: dict[str, str], output: int
    ) -> Process:
        program = executable or (argv[0] if "/" in argv[0] else None)
        devnull = self._devnull
        assert devnull is not None
        if (
            self._posix_spawn
            and program is not None
            and min(devnull, output) > 2  # a dup2 onto itself would keep close-on-exec
            and _is_here(cwd)
        ):
            actions = [
                (os.POSIX_SPAWN_DUP2, devnull, 0),
                (os.POSIX_SPAWN_DUP2, output, 1),
                (os.POSIX_SPAWN_DUP2, output, 2),
            ]
            try:
                pid = os.posix_spawn(
                    program,
                    argv,
                    env,
                    file_actions=actions,
                    setsid=True,  # its own session and process group, led by the worker
                    setsigdef=_DEFAULT_SIGNALS,
                )
            except NotImplementedError:  # pragma: no cover - a libc without POSIX_SPAWN_SETSID
                self._posix_spawn = False
            else:
                return Child(pid)
        return self._popen(argv, executable, cwd, env, output)

    def _popen(
        self, argv: list[str], executable: str | None, cwd: Path, env: dict[str, str], output: int
    ) -> Process:
        return subprocess.Popen(
            argv,
            executable=executable,
            cwd=cwd,
            env=env,
            stdin=self._devnull,
            stdout=output,
            stderr=output,
            start_new_session=True,  # its own process group, led by the worker
        )

    def program(self, name: str, path: str | None) -> str | None:
        """Where ``name`` lies on ``path`` (None: not found there, or left to
        the start's own search)."""
        return self._program(name, path)

    def _program(self, name: str, path: str | None) -> str | None:
        """Where ``name`` lies on ``path``, found once per run; None leaves
        the search to Popen: a name with a slash, a PATH with a relative
        directory (the worker's cwd decides those), or no PATH."""
        found = self._programs.get((name, path))
        if found is not None or "/" in name or not path:
            return found
        if not all(os.path.isabs(part) for part in path.split(os.pathsep)):
            return None
        found = shutil.which(name, path=path)
        if found is not None:
            self._programs[(name, path)] = found
        return found


def has_exited(proc: Process) -> bool:
    """Whether a child exited, without reaping it where the OS allows."""
    if not hasattr(os, "waitid"):  # pragma: no cover - reaping is the only way to know
        return proc.poll() is not None
    try:
        found = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True  # already reaped
    return found is not None


def _is_here(cwd: Path) -> bool:
    """Whether ``cwd`` is the current directory (posix_spawn cannot change it)."""
    try:
        return os.getcwd() == os.fspath(cwd)
    except OSError:
        return False


def _close_on_exec_beyond_stdio() -> bool:
    """Make every open descriptor above 2 close-on-exec (as every one gitrun
    opens is already; a parent's pipe or a make job server it was started
    with may not be), so a worker inherits nothing Popen would have closed.
    False where the open descriptors cannot be listed."""
    for where in ("/proc/self/fd", "/dev/fd"):
        try:
            names = os.listdir(where)
        except OSError:
            continue
        for name in names:
            fd = int(name)
            try:
                if fd > 2 and os.get_inheritable(fd):
                    os.set_inheritable(fd, False)
            except OSError:
                continue  # the listing's own descriptor, closed by now
        return True
    return False
