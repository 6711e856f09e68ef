"""Loading a run's view (:class:`gitrun.runview.RunShape`): from its cache,
by loading the definition, or, for a cold ``status`` on two CPUs, by
checking the definition beside a provisional reading.

:func:`load_view` gives the cached view when it holds the definition as it
is now (:func:`cached_view`), else loads the definition with every check
(:func:`gitrun.runs.load_run`) and writes the view for the next call.

A cold ``status`` (a fresh clone, an edit since the last load) must check
the definition with pydantic before it can say anything: at 10,000 tasks
about 0.15 s, most of it importing pydantic and building its models, and
the status itself takes about as long again. :class:`Beside` overlaps the
two. A forked child runs :func:`load_view` (every check, every cache it
writes), while the parent reads the same files plainly into a provisional
view (:func:`guess_view`: the packet and config.toml with tomllib, the task
table in the plain subset of :mod:`gitrun.tasktoml`, the ``GITRUN_*``
overrides as plain numbers or text) and computes the status from it.

The parent waits for the child, and uses its status only when the child
loaded the run and the view it wrote, under the key of the bytes the
parent hashed first, is the provisional view exactly
(:func:`gitrun.runview.view_holds`): the status is then the one that view
gives, the same as computed after a load. In every other case (the
definition does not load, a file changed in between, a table outside the
plain subset, an error while computing) the caller computes the status
again the usual way, with the usual errors. The child writes nothing but
the caches a load writes, and is always reaped; a child still running when
the parent is interrupted is killed (it is the parent's own and unreaped,
so its pid cannot be another process's).
"""

from __future__ import annotations

import io
import os
import signal
import sys

from gitrun.regular import read_regular
from gitrun.runview import (
    CONFIG_FILE,
    DECIMAL_NUMBER,
    DEFAULT_THROTTLE_PATTERNS,
    DEFINITION_VARS,
    PACKET_NAME,
    RUNS_DIR,
    TASKS_NAME,
    WHOLE_NUMBER,
    RunLimits,
    RunView,
    TaskView,
    check_run_id,
    read_view,
    source_key,
    view_holds,
    view_key,
    view_parts,
    view_path,
    write_view,
)

TYPE_CHECKING = False  # typing costs milliseconds; mypy reads this as True
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path
    from typing import Any, TypeVar

    from gitrun.hookrules import Repo
    from gitrun.runview import RunShape

    T = TypeVar("T")
    # What :func:`begin` found or started: a view cached, a check beside, neither.
    Begun = tuple[RunShape | None, "Beside | None"]

# settings.Limits' defaults (a test holds the two equal).
DEFAULT_LIMITS: dict[str, object] = {
    "concurrency": 4,
    "canary": 1,
    "max_attempts": 3,
    "max_spawns": 0,
    "timeout": 1200.0,
    "kill_grace": 5.0,
    "max_load": None,
    "payload_budget": 65536,
    "max_output_bytes": 256 * 1024 * 1024,
    "throttle_patterns": list(DEFAULT_THROTTLE_PATTERNS),
    "backoff_base": 2.0,
    "backoff_cap": 300.0,
    "grow_after": 3,
    "breaker_window": 0,
    "breaker_fast": 3.0,
    "halt": None,
    "max_cost_usd": None,
    "max_tokens": None,
    "max_projection": 1.5,
}
DEFAULT_STAGES = ["work"]  # settings.Packet's default stages


def load_view(
    repo: Repo, run_id: str, environ: Mapping[str, str] | None = None, keep: bool = False
) -> RunShape:
    """``run_id``'s shape: its cached view when the definition is unchanged,
    else the definition loaded (with every check and error of ``load_run``)
    and its view written for the next call (``keep``: and the definition
    kept, for a caller that goes on to use it whole)."""
    env = os.environ if environ is None else environ
    found, (path, _key) = cached_view(repo, run_id, env)
    if found is not None:
        return found
    from pathlib import Path

    from gitrun.runs import load_run

    run = load_run(Path(repo.root), run_id, environ=env, keep=keep)
    write_view(path, run.keys[1], run)  # keyed by the bytes the load read
    return run


def cached_view(
    repo: Repo, run_id: str, environ: Mapping[str, str]
) -> tuple[RunView | None, tuple[str, str]]:
    """``run_id``'s view when the cache holds its definition as it is now;
    and where that view is, with the key it is under."""
    from pathlib import Path

    check_run_id(run_id)
    key = view_key(source_key(repo.root, run_id), environ)
    path = view_path(repo.git_dir, run_id)
    found = read_view(path, key, Path(repo.root))
    return (found if found is not None and found.id == run_id else None), (path, key)


def worth_it() -> bool:
    """Two CPUs or more to run on, fork to start the child with (and waitid
    to see it end before it is reaped: Linux has it, macOS does not), and no
    other thread (whose locks a forked child could inherit held)."""
    if not (hasattr(os, "fork") and hasattr(os, "waitid")):  # pragma: no cover - Linux has both
        return False
    threading = sys.modules.get("threading")  # not imported: no thread was started by it
    if threading is not None and threading.active_count() > 1:
        return False
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - Linux has it
        cpus = os.cpu_count() or 1
    return cpus >= 2


def begin(repo: Path, run_id: str) -> Begun | None:
    """:func:`begin_at` for the repository whose top is ``repo``, called as
    early as a command can (before it imports what computing a status
    takes, which the child does not need); None when the repository is not
    found without git (the usual path finds it, or says why)."""
    from gitrun.hookrules import find_repo

    found = find_repo(str(repo))
    if found is None or found.root != os.path.realpath(repo):
        return None
    return begin_at(found, run_id)


def begin_at(found: Repo, run_id: str) -> Begun:
    """The cached view of ``run_id`` when it holds the definition as it is
    now; else the definition's check started beside (when :func:`worth_it`);
    else neither. Raises GitrunError for a run id that is not one."""
    view, where = cached_view(found, run_id, os.environ)
    if view is not None or not worth_it():
        return view, None
    return None, Beside(found, run_id, where)


class Beside:
    """A child process loading a run (and writing its view, the caches a load
    writes too), and the parent's provisional status beside it.

    What either prints is held back until it is known to be what the serial
    path prints: the child's stderr (a load's warnings) comes through a pipe
    and is printed once, by :meth:`status`, before anything the parent says;
    what computing the provisional status printed is printed only when that
    status is used (else the usual path computes it again, and says it
    again); and the load that follows an unused guess (:meth:`load`) is
    quiet, as the child said what loading says."""

    def __init__(self, found: Repo, run_id: str, view: tuple[str, str]) -> None:
        self.root = found.root
        self.run_id = run_id
        self.view = view  # the path of the view, and the key of the definition hashed first
        self.said = b""  # what the child printed on stderr
        self.ended = False  # the child ran to its end (its exit, not a signal)
        for stream in (sys.stdout, sys.stderr):  # nothing buffered is written twice
            try:  # noqa: SIM105 - contextlib costs 2 ms to import
                stream.flush()
            except (AttributeError, OSError, ValueError):
                pass  # the usual path meets it again
        self.pipe: int | None = None
        read, write = os.pipe()
        # SIGINT is held across the fork: the child must never raise
        # KeyboardInterrupt into the command's code, nor the parent lose the
        # child's pid to one raised before it is kept.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        self.pid: int | None = os.fork()
        if self.pid == 0:  # the child: load, and end without the parent's exit handlers
            code = 1
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends it, as SIGKILL would
            try:
                os.dup2(write, 2)
                os.close(write)
                os.close(read)
                # whatever sys.stderr was (a capture, a wrapper), the load's words reach the pipe
                encoding = getattr(sys.stderr, "encoding", None) or "utf-8"
                sys.stderr = open(  # noqa: SIM115 - the child's stderr for its whole life
                    2, "w", encoding=encoding, errors="backslashreplace", closefd=False
                )
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                load_view(found, run_id)
                code = 0
            finally:
                try:
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        self.pipe = read
        os.close(write)
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a held Ctrl-C is raised here
        except BaseException:
            self.close()
            raise

    def status(self, compute: Callable[[RunView], T]) -> T | None:
        """``compute(guess)`` for the provisional view when the child loaded
        the run and its view is the guess exactly; None when it is not, or
        there was no guess, or computing raised (the caller computes it
        again the usual way, after :meth:`load`). The child is reaped in
        every case, and what it printed is printed."""
        from contextlib import redirect_stderr  # loaded by now: state imported it

        held = io.StringIO()  # what computing printed, said only when its status is used
        try:
            result: T | None = None
            expected: dict[str, object] | None = None
            try:  # a guess that fails is no guess: the usual way gives its error, if any
                guess = guess_view(self.root, self.run_id, os.environ)
                if guess is not None:
                    with redirect_stderr(held):
                        result = compute(guess)
                    expected = view_parts(self.view[1], guess)[0]  # while the child works
            except Exception:  # computed again the usual way, its error and all
                result = None
            loaded = self._wait()
        finally:
            self.close()
        _say(self.said)  # first, as a load's warnings come before a status's
        if not loaded or result is None or expected is None:
            return None
        if not view_holds(self.view[0], expected):
            return None
        sys.stderr.write(held.getvalue())
        return result

    def load(self, found: Repo) -> RunShape:
        """:func:`load_view`, after :meth:`status` gave None: quiet when the
        child ran to its end, whose warnings :meth:`status` printed (its
        view, when it loaded the run, serves this load)."""
        from contextlib import redirect_stderr

        if not self.ended:
            return load_view(found, self.run_id)
        with redirect_stderr(io.StringIO()):
            return load_view(found, self.run_id)

    def _wait(self) -> bool:
        """Read what the child prints until it ends, and reap it."""
        assert self.pid is not None and self.pipe is not None
        chunks = []
        while chunk := os.read(self.pipe, 1 << 16):
            chunks.append(chunk)
        self.said = b"".join(chunks)
        os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)  # ended: reaps nothing yet
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:  # the pid is forgotten as the child is reaped, never killed after that
            _, status = os.waitpid(self.pid, 0)
            self.pid = None
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        self.ended = os.WIFEXITED(status)
        return self.ended and os.WEXITSTATUS(status) == 0

    def close(self) -> None:
        """Kill the child when it still runs (interrupted: it is this
        process's own and unreaped, so its pid cannot be another's) and reap it."""
        if self.pipe is not None:
            pipe, self.pipe = self.pipe, None
            os.close(pipe)
        if self.pid is not None:
            pid, self.pid = self.pid, None
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def _say(data: bytes) -> None:
    """Print ``data``, what the child printed, on this process's stderr."""
    if not data:
        return
    stream = sys.stderr
    binary = getattr(stream, "buffer", None)
    if binary is None:  # a text stream only (a test's capture)
        stream.write(data.decode("utf-8", "replace"))
        return
    stream.flush()
    binary.write(data)
    binary.flush()


def guess_view(root: str, run_id: str, environ: Mapping[str, str]) -> RunView | None:
    """The view loading would give ``run_id``, read plainly: None when no
    guess is made (an override in ``environ``, a file missing or outside the
    plain subset, a value of an unexpected kind). Nothing is checked here:
    only a view that the checked load gives too is used."""
    overrides = _overrides(environ)
    if overrides is None:
        return None
    from pathlib import Path

    from gitrun.tasktoml import loads_task_table

    run_dir = os.path.join(root, RUNS_DIR, run_id)
    try:
        config = _toml(os.path.join(root, CONFIG_FILE), missing_ok=True)
        packet = _toml(os.path.join(run_dir, PACKET_NAME), missing_ok=False)
        text = read_regular(os.path.join(run_dir, TASKS_NAME), follow=False).decode()
        table = loads_task_table(text)
        if table is None:
            return None
        limits = RunLimits(
            _as_loaded({**DEFAULT_LIMITS, **_table(config, "limits"), **_table(packet, "limits")})
            | overrides
        )
        kind = _table(packet, "executor").get("kind", _table(config, "executor").get("kind"))
        stages = [stage["name"] for stage in packet.get("stages", ())] or DEFAULT_STAGES
        tasks = [TaskView(task["id"], task.get("stage"), task["outputs"]) for task in table["task"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ArithmeticError):
        return None  # e.g. a float field holding an integer no float holds
    except RecursionError:  # tomllib's, on arrays nested thousands deep
        return None
    if not all(isinstance(name, str) for name in stages):
        return None
    return RunView(Path(root), run_id, stages, kind or "command", limits, tasks)


def _overrides(environ: Mapping[str, str]) -> dict[str, object] | None:
    """The limits the ``GITRUN_*`` variables set, read plainly as loading
    reads them (gitrun.settings.ENV_OVERRIDES): a whole number for a whole
    field, a whole or decimal one as a float for a float field, the text for
    a text field; None for one read otherwise (loading gives it, or says
    why). GITRUN_MODEL sets no limit."""
    kinds = RunLimits.__annotations__
    limits: dict[str, object] = {}
    for var in DEFINITION_VARS:
        value = environ.get(var)
        if value is None or var == "GITRUN_MODEL":
            continue
        name = var.removeprefix("GITRUN_").lower()
        kind = kinds[name].removesuffix(" | None")
        if kind == "str" and value and value == value.strip():
            limits[name] = value
        elif kind == "int" and WHOLE_NUMBER.fullmatch(value):
            limits[name] = int(value)
        elif kind == "float" and DECIMAL_NUMBER.fullmatch(value):
            limits[name] = float(value)
        else:
            return None
    return limits


def _as_loaded(values: dict[str, object]) -> dict[str, object]:
    """``values`` of the limits with a whole number in a float field made a
    float, as pydantic makes it: the view shows ``5.0`` for ``5``."""
    kinds = RunLimits.__annotations__
    for name, value in values.items():
        if type(value) is int and kinds.get(name, "").startswith("float"):
            values[name] = float(value)  # OverflowError past 1e308: no guess
    return values


def _toml(path: str, missing_ok: bool) -> dict[str, Any]:
    import tomllib

    try:
        data = read_regular(path, follow=False)
    except FileNotFoundError:
        if missing_ok:
            return {}
        raise
    return tomllib.loads(data.decode())


def _table(raw: dict[str, Any], name: str) -> dict[str, Any]:
    table = raw.get(name, {})
    if not isinstance(table, dict):
        raise TypeError(name)
    return table
