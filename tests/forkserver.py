"""gitrun as a real child process, without paying its imports each time.

Most of a `python -m gitrun ...` child's CPU time is the interpreter starting
and importing gitrun and its libraries (about 0.2 s), and the suite runs such
children thousands of times. One server per test process imports gitrun once
and forks a child for each call. The child is a process of its own, like a
`subprocess.run` one: it gets its own pid, the call's working directory,
environment, stdin, stdout and stderr, runs `python -m gitrun` as the
interpreter would (``runpy``), and its exit status is the call's return code.

The server is a fork of nothing but an interpreter that imported gitrun: it
runs no test code, starts no thread and holds no lock, so forking it is safe.
Each call is served by a fork of the server (the waiter) that forks the
child, waits for it and reports its status, so calls may overlap. A call whose
environment changes how the interpreter itself starts (``PYTHON*``, the
locale) runs as a plain child process instead, as does every call when the
server cannot start.

    python -c 'from tests.forkserver import serve; serve(PATH)'
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

# Settings read when an interpreter starts: a call that changes one is no fork.
_STARTUP = ("PYTHON", "LC_", "LANG")
_AT_CALL = {"PYTHONBREAKPOINT"}  # read when breakpoint() is called, not at start
_PRELOAD_SKIP = ("gitrun.workers.ray", "gitrun.engine.otel", "gitrun.mcp")


def _preload() -> None:
    """Every gitrun module a command may import, except the optional extras."""
    import importlib
    import pkgutil

    import gitrun

    for info in pkgutil.walk_packages(gitrun.__path__, "gitrun."):
        if info.name.startswith(_PRELOAD_SKIP) or info.name == "gitrun.__main__":
            continue
        try:
            importlib.import_module(info.name)
        except ImportError:  # pragma: no cover - an extra that is not installed
            continue
    from gitrun.cli.app import command

    command()  # the command line typer builds once a process


def _child(request: dict[str, object], fds: list[int]) -> None:  # pragma: no cover - forked
    """Become `python -m gitrun ARGS` in the call's directory and environment."""
    import random
    import runpy
    import traceback

    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(str(request["cwd"]))
        env = request["env"]
        assert isinstance(env, dict)
        os.environ.clear()
        os.environ.update(env)
        random.seed()
        if any(key.startswith("_TYPER") for key in env):
            # typer reads these when it builds the command line: build it again
            from gitrun.cli.app import command

            command.cache_clear()
        args = request["args"]
        assert isinstance(args, list)
        sys.argv = ["gitrun", *map(str, args)]
        try:
            runpy.run_module("gitrun", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as stop:
            if stop.code is None:
                code = 0
            elif isinstance(stop.code, int):
                code = stop.code
            else:
                print(stop.code, file=sys.stderr)
                code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)


def _serve_one(conn: socket.socket) -> None:  # pragma: no cover - forked
    """The waiter: read one call, fork its child, say its pid, then its status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    request = json.loads(message)
    pid = os.fork()
    if pid == 0:
        conn.close()
        _child(request, fds)
    for fd in fds:
        os.close(fd)
    conn.sendall(f"{pid}\n".encode())
    _, status, usage = os.wait4(pid, 0)
    cpu = usage.ru_utime + usage.ru_stime
    conn.sendall(f"{os.waitstatus_to_exitcode(status)} {cpu}\n".encode())


def serve(path: str) -> None:  # pragma: no cover - the server process
    _preload()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the waiters are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(64)
    os.rename(path + ".new", path)  # the path appears once calls can connect
    parent = os.getppid()
    listener.settimeout(1.0)
    while os.getppid() == parent:  # ends with the test process that started it
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        if os.fork() == 0:
            listener.close()
            try:
                _serve_one(conn)
            finally:
                os._exit(0)
        conn.close()


class ForkServer:
    """The client: one server per test process, started on first use."""

    def __init__(self) -> None:
        self.path = ""
        self.process: subprocess.Popen[bytes] | None = None
        self.broken = False
        self.starts_failed = 0
        self.forked = 0  # calls served by a fork
        self.cpu = 0.0  # CPU seconds the forked children used (without their own children)
        self.plain: dict[str, int] = {}  # calls run as plain children, by the reason
        self.env = dict(os.environ)  # the environment the server starts with

    def _start(self) -> bool:
        if self.broken:
            self.plain["no server"] = self.plain.get("no server", 0) + 1
            return False
        if self.process is not None and self.process.poll() is None:
            return True
        folder = tempfile.mkdtemp(prefix="gitrun-fork-", dir="/tmp")
        self.path = os.path.join(folder, "s")
        root = str(Path(__file__).resolve().parent.parent)
        code = f"from tests.forkserver import serve; serve({self.path!r})"
        self.process = subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=root,
            env={**self.env, "PYTHONPATH": os.pathsep.join([root, *sys.path[1:]])},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while not os.path.exists(self.path):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.starts_failed += 1
                self.broken = self.starts_failed >= 3
                self.plain["server did not start"] = self.plain.get("server did not start", 0) + 1
                self.stop()
                return False
            time.sleep(0.02)
        atexit.register(self.stop)
        return True

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def _connect(self) -> socket.socket | None:
        """A connection to a live server (started again if it died or its
        socket went), or None."""
        for _ in range(2):
            if not self._start():
                return None
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.connect(self.path)
                return conn
            except OSError:
                conn.close()
                self.plain["server gone"] = self.plain.get("server gone", 0) + 1
                self.stop()
        return None

    def forkable(self, env: Mapping[str, str]) -> bool:
        """Whether ``env`` starts an interpreter as the server's started."""
        for key in set(env) | set(self.env):
            if key in _AT_CALL or not key.startswith(_STARTUP):
                continue
            if env.get(key) != self.env.get(key):
                self.plain[key] = self.plain.get(key, 0) + 1
                return False
        return True

    def run(
        self,
        args: list[str],
        cwd: Path | str,
        env: Mapping[str, str],
        stdin: str | bytes | None,
        timeout: float,
        text: bool,
    ) -> subprocess.CompletedProcess[str] | subprocess.CompletedProcess[bytes] | None:
        """The call's result, or None where it must run as a plain child."""
        if not self.forkable(env):
            return None
        conn = self._connect()
        if conn is None:
            return None
        data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
        with (
            tempfile.TemporaryFile() as given,
            tempfile.TemporaryFile() as out,
            tempfile.TemporaryFile() as err,
        ):
            given.write(data)
            given.seek(0)
            request = {"args": args, "cwd": str(cwd), "env": dict(env)}
            try:
                socket.send_fds(
                    conn,
                    [json.dumps(request).encode()],
                    [given.fileno(), out.fileno(), err.fileno()],
                )
                reader = conn.makefile("rb")
                pid = int(reader.readline())
                conn.settimeout(timeout)
                try:
                    said = reader.readline().split()
                    code = int(said[0])
                    self.cpu += float(said[1])
                except (TimeoutError, OSError):
                    os.kill(pid, signal.SIGKILL)  # the child this call forked
                    out.seek(0)
                    raise subprocess.TimeoutExpired(
                        ["gitrun", *args], timeout, output=out.read()
                    ) from None
            finally:
                conn.close()
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        self.forked += 1
        argv = [sys.executable, "-m", "gitrun", *args]
        if text:
            return subprocess.CompletedProcess(
                argv, code, stdout.decode(errors="replace"), stderr.decode(errors="replace")
            )
        return subprocess.CompletedProcess(argv, code, stdout, stderr)


SERVER = ForkServer()


def run_gitrun_call(
    args: list[str],
    cwd: Path | str,
    env: Mapping[str, str] | None = None,
    stdin: str | bytes | None = None,
    timeout: float = 120,
    text: bool = True,
) -> subprocess.CompletedProcess[str]:
    """`python -m gitrun ARGS` in ``cwd``, run to its end, output captured:
    forked from the server where it can be, else a plain child process."""
    env = dict(os.environ if env is None else env)
    done = SERVER.run(args, cwd, env, stdin, timeout, text)
    if done is not None:
        return done  # type: ignore[return-value]
    return run_plain(args, cwd, env, stdin, timeout, text)


def run_plain(
    args: list[str],
    cwd: Path | str,
    env: Mapping[str, str],
    stdin: str | bytes | None = None,
    timeout: float = 120,
    text: bool = True,
) -> subprocess.CompletedProcess[str]:
    """`python -m gitrun ARGS` as a plain child process: an interpreter of its own."""
    return subprocess.run(
        [sys.executable, "-m", "gitrun", *args],
        cwd=cwd,
        env=env,
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        text=text,
        timeout=timeout,
    )
