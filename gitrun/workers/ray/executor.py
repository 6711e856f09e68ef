"""Attempts on a Ray cluster (``[executor] kind = "ray"``, the ``gitrun[ray]`` extra).

Ray only places and runs attempts; this driver still validates and commits.
Each attempt is one Ray task (``max_retries=0``: gitrun owns attempts) that
runs :func:`gitrun.workers.ray.node.run_attempt` on a node with the stage's resources.
By default the task's inputs, its packet and its outputs' current content go
with it, read from the run's base commit (an earlier stage's outputs as they
were validated), and the node runs the command in a scratch directory and
sends back the declared outputs, which the driver writes into its work tree,
and nothing else, before it checks them as for a local attempt. With
``shared_fs = true`` the repository is at the same path on every node and
the command runs there, as a local one does.

A node or worker lost under an attempt (``WorkerCrashedError``,
``NodeDiedError``, a lost object) is the environment's failure: the attempt
ends ``lost``, uses none of the task's attempts and feeds the governor's
breaker. A node enforces the attempt's timeout itself (TERM to the group,
KILL after the grace) and reports what the worker wrote; a node that has not
answered by then is force-cancelled.

Ray is imported here only, and only when a run uses it: ``gitrun --version``,
``check`` and ``status`` never import it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import socket
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gitrun.definition.load import RunDef
from gitrun.errors import GitrunError
from gitrun.problem import Problem
from gitrun.store.usage import Usage
from gitrun.visible import visible
from gitrun.workers import carry
from gitrun.workers.attempt import AttemptEnd, usage_file
from gitrun.workers.clients import UnreachableWatch, exit_fault
from gitrun.workers.clientusage import MAX_FILE, USAGE_ENV, attempt_usage
from gitrun.workers.presets import client_signs, find_preset, usage_reader
from gitrun.workers.ray import node as raynode
from gitrun.workers.scratch import AttemptFiles

INSTALL = "pip install 'gitrun[ray]'"
# Seconds a node has, past the deadline and the kill grace, to report an
# attempt it ended itself before the driver force-cancels the Ray task.
NODE_SLACK = 15.0
PROBE_TIMEOUT = 5.0  # seconds to wait for the cluster's address to answer at all
# What Ray raises when the machine under an attempt was lost, not the task.
LOST_ERRORS = (
    "WorkerCrashedError",
    "NodeDiedError",
    "ObjectLostError",
    "OwnerDiedError",
    "ObjectFetchTimedOutError",
    "ReferenceCountingAssertionError",
    "ObjectReconstructionFailedError",
    "LocalRayletDiedError",
    "RaySystemError",
)

Reporter = Callable[[str], None]


def is_ray_installed() -> bool:
    """Whether Ray can be imported, without importing it."""
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


def ray_problems(run: RunDef) -> list[Problem]:
    """``gitrun check``'s sentences about a Ray executor table."""
    executor = run.packet.executor
    if executor.kind != "ray":
        return []
    out = []
    if not is_ray_installed():
        out.append(
            Problem(
                "executor",
                f'{run.packet_path}: [executor] kind = "ray" needs Ray, which is not installed '
                f"here; install it with `{INSTALL}` (or choose another executor kind)",
            )
        )
    record = find_preset(executor.preset)
    hooked = record is not None and record.hooks is not None
    if not executor.shared_fs and executor.command is None and hooked:
        out.append(
            Problem(
                "executor",
                f'{run.packet_path}: [executor] preset "{executor.preset}" enforces ownership '
                "with hooks that read the repository, which a Ray node's scratch directory is not (every "
                "write would be refused); set shared_fs = true with the repository at the same "
                "path on every node, or give a `command`",
            )
        )
    known = run.stage_names
    for stage in executor.resources.stages:
        if stage not in known:
            out.append(
                Problem(
                    "executor",
                    f"{run.packet_path}: [executor.resources.stages] names stage {stage!r}, "
                    f"which [[stages]] does not list (stages: {', '.join(known)}); fix the name",
                )
            )
    return out


class RayAttempt:
    """One attempt out on the cluster, as the driver sees it."""

    def __init__(self, runner: RayRunner, task: str, number: int, ref: Any, timeout: float):
        self.runner = runner
        self.task = task
        self.number = number
        self.ref = ref
        self.started = time.time()  # for the ledger
        self.began = time.monotonic()  # for its deadline and duration
        self.deadline = self.began + timeout
        self.pid = 0  # no process of it runs on this machine (as far as gitrun knows)
        self.create_time: float | None = None
        self.cmdline: list[str] | None = None
        self.timed_out = False
        self.stopped = False
        self.log_path = Path()
        self.argv: list[str] = []
        self._cancel_at: float | None = None
        self._forced = False

    @property
    def next_event(self) -> float:
        return self._cancel_at if self._cancel_at is not None else self.deadline

    def expire(self) -> None:
        """The deadline passed here: the node stops the attempt itself at its
        own deadline; it is force-cancelled if it does not answer in time."""
        if not self.timed_out:
            self.timed_out = True
            self._give_until(self.runner.kill_grace + NODE_SLACK)

    def stop(self) -> None:
        """gitrun is stopping: the node terminates the attempt's group (TERM,
        then KILL after the grace); force-cancelled if it does not answer."""
        if not self.stopped:
            self.stopped = True
            self.runner.cancel(self.ref, force=False)
            self._give_until(self.runner.kill_grace + NODE_SLACK)

    def escalate(self, now: float) -> None:
        if self._cancel_at is not None and now >= self._cancel_at and not self._forced:
            self._forced = True
            self._cancel_at = None
            self.runner.cancel(self.ref, force=True)

    def span(self) -> tuple[float, float]:
        """Its start and now, on the monotonic clock (its duration, at its end)."""
        return self.began, time.monotonic()

    def _give_until(self, seconds: float) -> None:
        if self._cancel_at is None and not self._forced:
            self._cancel_at = time.monotonic() + seconds


class RayRunner:
    """Starts attempts as Ray tasks and reports the ones that ended."""

    def __init__(self, run: RunDef, base: str | None, report: Reporter) -> None:
        self.run = run
        self.repo = run.repo
        self.executor = run.packet.executor
        self.kill_grace = run.packet.limits.kill_grace
        self.report = report
        self.ray = _connect(self.executor.address, run.id)
        # What the cluster says to this driver (a node marked dead, ...) is
        # reported between attempts, never printed over gitrun's own output.
        self._said: deque[str] = deque(maxlen=100)
        self._restore = _route_messages(self._said.append)
        # The node function goes to the cluster by value: a node needs Ray, not gitrun.
        self.ray.cloudpickle.register_pickle_by_value(carry)
        self.ray.cloudpickle.register_pickle_by_value(raynode)
        self._remote = self.ray.remote(max_retries=0)(raynode.run_attempt)
        found = (getattr(self.ray.exceptions, name, None) for name in LOST_ERRORS)
        self._lost_types: tuple[type[BaseException], ...] = tuple(
            t for t in found if isinstance(t, type) and issubclass(t, BaseException)
        )
        self.files = AttemptFiles(run, base)
        self._tasks = {task.id: task for task in run.tasks}
        self._live: dict[Any, RayAttempt] = {}
        self._early: list[AttemptEnd] = []

    # -- starting ----------------------------------------------------------------------

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
    ) -> RayAttempt:
        assert not confine  # a node's attempt runs in its own scratch directory
        definition = self._tasks[task]
        stage = self.run.stage_of(definition)
        # The node's own environment, plus what gitrun tells the worker: the
        # driver's PATH and HOME mean nothing on another machine.
        own = {k: v for k, v in env.items() if k.startswith("GITRUN_")}
        own.update(self.executor.env)
        spec: dict[str, Any] = {
            "argv": argv,
            "env": own,
            "timeout": timeout,
            "kill_grace": self.kill_grace,
            "outputs": self.run.output_paths(definition),
            "max_output_bytes": self.run.packet.limits.max_output_bytes,
            # $GITRUN_USAGE names a file on the node; what the worker wrote comes back
            "usage": {"env": USAGE_ENV, "max": MAX_FILE},
        }
        if self.executor.shared_fs:
            spec["cwd"] = str(cwd)
        else:
            spec["files"] = self.files.files_of(definition)
        res = self.executor.resources.for_stage(stage)
        options: dict[str, Any] = {"num_cpus": res.num_cpus, "num_gpus": res.num_gpus}
        if res.memory:
            options["memory"] = res.memory
        if res.custom:
            options["resources"] = dict(res.custom)
        attempt = RayAttempt(self, task, number, None, timeout)
        attempt.log_path, attempt.argv = log_path, argv
        try:
            attempt.ref = self._remote.options(**options).remote(spec)
        except Exception as exc:  # Ray refused the request (bad resources, gone cluster)
            log_path.write_text(f"gitrun: Ray did not take the attempt: {exc}\n")
            self._early.append(_failed(attempt, f"Ray did not take the attempt: {exc}"))
            return attempt
        self._live[attempt.ref] = attempt
        return attempt

    # -- what ended --------------------------------------------------------------------------

    def poll(self, timeout: float) -> list[AttemptEnd]:
        """Wait up to ``timeout`` seconds; return the attempts that ended."""
        ended, self._early = self._early, []
        while self._said:
            self.report(f"ray: {self._said.popleft()}")
        if not self._live:
            time.sleep(0 if ended else max(0.0, timeout))
            return ended
        refs = list(self._live)
        ready, _ = self.ray.wait(refs, num_returns=1, timeout=0 if ended else max(0.0, timeout))
        if ready:
            ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in ready:
            ended.append(self._end(self._live.pop(ref), ref))
        return ended

    def _end(self, attempt: RayAttempt, ref: Any) -> AttemptEnd:
        exceptions = self.ray.exceptions
        try:
            result = self.ray.get(ref)
        except exceptions.TaskCancelledError:
            note = "cancelled: the node did not answer in time" if attempt.timed_out else "stopped"
            return _failed(attempt, f"gitrun: {note}", log=True)
        except exceptions.RayTaskError as exc:  # the node function itself failed
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            if isinstance(cause, self._lost_types):
                return _lost(attempt, cause)
            text = f"gitrun: the attempt failed on its node: {_first_line(cause)}"
            return _failed(attempt, text, log=True)
        except exceptions.RayError as exc:
            if isinstance(exc, self._lost_types):
                return _lost(attempt, exc)
            return _failed(attempt, f"gitrun: Ray failed the attempt: {_first_line(exc)}", log=True)
        return self._finish(attempt, result)

    def _finish(self, attempt: RayAttempt, result: dict[str, Any]) -> AttemptEnd:
        tail: bytes = result["tail"]
        with attempt.log_path.open("wb") as log:
            log.write(result["log"])
            if result["dropped"]:
                note = f"\n[gitrun: {result['dropped']} bytes dropped; the last ones follow]\n"
                log.write(note.encode() + tail)
            took = result["took"]
            log.write(f"\n[gitrun: ran on node {result['node']} for {took:.1f} s]\n".encode())
        written = self.files.write_outputs(self._tasks[attempt.task], result["outputs"])
        refused = "; ".join(f"{path}: {why}" for path, why in result["refused"].items())
        if written:
            refused = "; ".join(filter(None, [refused, written]))
        status = int(result["status"])
        timed_out = bool(result["timed_out"]) or attempt.timed_out
        usage, said = self._usage(attempt, result)
        return AttemptEnd(
            attempt.task,
            attempt.number,
            attempt.started,
            time.time(),
            status if status >= 0 else None,
            -status if status < 0 else None,
            timed_out,
            attempt.stopped,
            said[-4096:] if said is not None else tail[-4096:].decode(errors="replace"),
            _client_fault(attempt, tail, status, timed_out),
            refused=refused,
            dispatch="ray",
            span=attempt.span(),
            usage=usage,
        )

    def _usage(
        self, attempt: RayAttempt, result: dict[str, Any]
    ) -> tuple[Usage | None, str | None]:
        """What the attempt used, as a local attempt's is read: its client's own
        report in its output, unless its worker wrote a usage file on the node;
        and the client's readable text for the tail."""
        usage = said = None
        reader = usage_reader(attempt.argv)
        if reader is not None:
            reader.feed(result["log"])
            if result["dropped"]:  # the middle is gone: the last bytes start a line of their own
                reader.feed(b"\n" + result["tail"])
            report = reader.finish()
            usage, said = report.usage, report.text
        written = result.get("usage_file")
        if isinstance(written, bytes):
            path = usage_file(attempt.log_path)
            path.write_bytes(written)
            usage, message = attempt_usage(usage, path, attempt.task, attempt.number)
            if message:
                self.report(f"warning: {message}")
        return usage, said

    def cancel(self, ref: Any, force: bool) -> None:
        if ref is None:
            return
        # Already ended, or gone with its node: poll says which.
        with contextlib.suppress(Exception):
            self.ray.cancel(ref, force=force)

    def close(self) -> None:
        for ref in self._live:
            self.cancel(ref, force=True)
        self._live.clear()
        self.ray.shutdown()
        self._restore()


def _connect(address: str, run_id: str) -> Any:
    try:
        # deferred: ray is an optional extra (gitrun[ray])
        import ray
    except ImportError as exc:
        raise GitrunError(
            f'[executor] kind = "ray" needs Ray, which is not installed here; install it '
            f"with `{INSTALL}`"
        ) from exc
    if not hasattr(ray, "init"):  # a ray.py of someone else's, earlier on sys.path
        raise GitrunError(
            f"`import ray` found {getattr(ray, '__file__', 'a module')}, which is not Ray; "
            "rename that file or run gitrun where it is not on the import path"
        )
    unreachable = (
        f"cannot reach the Ray cluster at [executor] address {address!r}"
        " ({}); start it (`ray start --head`) or fix the address, then "
        f"`gitrun resume {run_id}`"
    )
    _probe(address, unreachable)
    target = None if address == "local" else address
    try:
        ray.init(
            address=target,
            namespace="gitrun",
            logging_level=logging.WARNING,
            log_to_driver=False,
            include_dashboard=False if target is None else None,
            ignore_reinit_error=True,
        )
    except Exception as exc:
        raise GitrunError(unreachable.format(_first_line(exc))) from exc
    return ray


def _probe(address: str, unreachable: str) -> None:
    """Ray waits for minutes on an address where nothing listens: knock first."""
    if address in ("auto", "local"):  # Ray answers at once for these
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT):
            pass
    except OSError as exc:
        raise GitrunError(unreachable.format(exc.strerror or "no answer")) from exc


def _route_messages(sink: Callable[[str], None]) -> Callable[[], None]:
    """Ray's driver prints the cluster's error messages (a node marked dead)
    to standard output from a thread of its own, which would break
    ``--json``: send them to ``sink`` instead. Returns the undo."""
    module = sys.modules.get("ray._private.worker")
    original = getattr(module, "print_to_stdstream", None)
    if module is None or original is None:  # pragma: no cover - another Ray layout
        return lambda: None

    def to_sink(data: dict[str, Any], ignore_prefix: bool = False) -> None:
        for line in data.get("lines", []):
            text = str(line).strip().splitlines()
            if text:
                sink(text[0][:300])

    setattr(module, "print_to_stdstream", to_sink)  # noqa: B010 - a module of Ray's, untyped
    return lambda: setattr(module, "print_to_stdstream", original)


def _failed(attempt: RayAttempt, text: str, log: bool = False) -> AttemptEnd:
    """An attempt that ended without a result from its node."""
    if log:
        attempt.log_path.write_text(text + "\n")
    now = time.time()
    status = None if attempt.timed_out or attempt.stopped else 127
    return AttemptEnd(
        attempt.task,
        attempt.number,
        attempt.started,
        now,
        status,
        None,
        attempt.timed_out,
        attempt.stopped,
        text,
        dispatch="ray",
        span=attempt.span(),
    )


def _lost(attempt: RayAttempt, exc: BaseException) -> AttemptEnd:
    why = visible(f"{type(exc).__name__}: {_first_line(exc)}")
    attempt.log_path.write_text(f"gitrun: lost with its node or worker: {why}\n")
    return AttemptEnd(
        attempt.task,
        attempt.number,
        attempt.started,
        time.time(),
        None,
        None,
        attempt.timed_out,
        attempt.stopped,
        why,
        lost=f"the Ray node or worker running it was lost ({why})",
        dispatch="ray",
        span=attempt.span(),
    )


def _client_fault(attempt: RayAttempt, tail: bytes, status: int, timed_out: bool) -> str:
    """The client's environment fault, read from the output a node sent back
    (the local monitor reads it as it comes)."""
    client = client_signs(attempt.argv)
    said = None
    if client is not None and client[1].unreachable:
        said = UnreachableWatch(*client).feed(tail + b"\n")
    if said is None and not (timed_out or attempt.stopped):
        said = exit_fault(client, status, tail.decode(errors="replace"))
    return f"environment fault: {attempt.task} attempt {attempt.number}: {said}" if said else ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__
