"""Driving a run: ``start`` and ``resume``.

The driver launches attempts with at most ``concurrency`` running, decides
each attempt's outcome from the files on disk alone, records it in the
ledger, and hands valid tasks to a background committer. ``resume`` first
stops the workers a dead driver left behind, then reconciles: committed
outputs are done, valid outputs on disk are committed now, invalid ones are
quarantined, and only the rest is dispatched again.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gitrun import git, ledger
from gitrun.attempt import Attempt, AttemptEnd, Monitor
from gitrun.check import Problem, check_run
from gitrun.committer import (
    BRANCH_PREFIX,
    CommitQueue,
    Committed,
    Committer,
    Landing,
    branch_ref,
    landing_message,
    trailers,
)
from gitrun.errors import GitrunError
from gitrun.executor import command_template, render_command
from gitrun.history import find_base
from gitrun.local import LocalPaths
from gitrun.lock import RunLock, run_locked
from gitrun.outputs import blob_id, check_task, quarantine
from gitrun.pointer import render_pointer
from gitrun.proc import clean_env
from gitrun.runs import CONFIG_FILE, LEDGER_NAME, RunDef, Task, load_run
from gitrun.state import RunStatus, committed_tasks, read_status, running_records
from gitrun.tomlfile import write_atomic

HEARTBEAT = 2.0  # seconds between owner-record heartbeats
TICK = 0.5  # longest wait before the loop looks at deadlines and signals again

Reporter = Callable[[str], None]


@dataclass
class RunOutcome:
    status: RunStatus
    exit_code: int
    stopped_by: str | None = None


class CheckFailed(GitrunError):
    def __init__(self, run_id: str, problems: list[Problem]) -> None:
        self.problems = problems
        lines = [f"run {run_id!r} did not pass `gitrun check` ({len(problems)} problems):"]
        lines += [f"  [{p.code}] {p.message}" for p in problems]
        super().__init__("\n".join(lines))


def start_run(repo: Path, run_id: str, report: Reporter) -> RunOutcome:
    """Check the run, create its branch with the definition, and drive it."""
    run = load_run(repo, run_id)
    local = LocalPaths.of(repo, run_id)
    with run_locked(local, run_id) as lock:
        if git.rev_parse(repo, branch_ref(run_id)) or git.remote_refs(repo, BRANCH_PREFIX + run_id):
            raise GitrunError(
                f"run {run_id!r} has already started (branch gitrun/{run_id} exists); continue it "
                f"with `gitrun resume {run_id}`"
            )
        problems = check_run(run).problems
        if problems:
            raise CheckFailed(run_id, problems)
        head = git.rev_parse(repo, "HEAD")
        if head is None:
            raise GitrunError(
                "the repository has no commits yet; commit something first so the run has a "
                "point to fork from"
            )
        _retire_stale_ledger(run, local)
        committer = Committer(repo, run_id, local)
        files = definition_files(run)
        base_tree = git.ls_tree(repo, head, sorted(files))
        fmt = committer.object_format
        files = {
            p: d
            for p, d in files.items()
            if p != CONFIG_FILE or base_tree.get(p, ("", ""))[1] != blob_id(d, fmt)
        }
        message = f"gitrun({run_id}): start run\n\n{trailers(run_id, [], {'Gitrun-Base': head})}\n"
        committer.start_branch(head, files, message)
        report(f"run {run_id}: started on branch gitrun/{run_id} from {head[:10]}")
        return Driver(run, local, lock, committer, report).drive()


def resume_run(repo: Path, run_id: str, report: Reporter) -> RunOutcome:
    """Reconcile a run with what is committed and on disk, then drive it on."""
    local = LocalPaths.of(repo, run_id)
    with run_locked(local, run_id) as lock:
        tip = _ensure_branch(repo, run_id, report)
        _restore_definition(repo, run_id, tip, report)
        run = load_run(repo, run_id)
        problems = check_run(run, check_dirty=False).problems
        if problems:
            raise CheckFailed(run_id, problems)
        committer = Committer(repo, run_id, local)
        driver = Driver(run, local, lock, committer, report)
        driver.recover_orphans()
        driver.reconcile()
        return driver.drive()


def definition_files(run: RunDef) -> dict[str, bytes]:
    """gitrun's own files of a run: its directory (ledger included) and the repo config."""
    files: dict[str, bytes] = {}
    run_dir = run.repo / run.dir
    for path in sorted(run_dir.rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            files[path.relative_to(run.repo).as_posix()] = path.read_bytes()
    config = run.repo / CONFIG_FILE
    if config.is_file():
        files[CONFIG_FILE] = config.read_bytes()
    return files


def _retire_stale_ledger(run: RunDef, local: LocalPaths) -> None:
    """A ledger without a branch is left from a run whose branch was deleted."""
    stale = run.repo / run.dir / LEDGER_NAME
    if stale.exists():
        local.root.mkdir(parents=True, exist_ok=True)
        os.replace(stale, local.root / f"ledger.{int(time.time())}.jsonl")


def _ensure_branch(repo: Path, run_id: str, report: Reporter) -> str:
    ref = branch_ref(run_id)
    tip = git.rev_parse(repo, ref)
    if tip:
        return tip
    remotes = git.remote_refs(repo, BRANCH_PREFIX + run_id)
    if not remotes:
        raise GitrunError(
            f"run {run_id!r} has not started (no branch gitrun/{run_id} here or on a remote); "
            f"start it with `gitrun start {run_id}`"
        )
    tip = git.rev_parse(repo, remotes[0])
    assert tip is not None
    git.update_ref(repo, ref, tip, None)
    report(
        f"run {run_id}: branch gitrun/{run_id} created from {remotes[0].removeprefix('refs/remotes/')}"
    )
    return tip


def _restore_definition(repo: Path, run_id: str, tip: str, report: Reporter) -> None:
    """Bring back run files that exist on the branch but not on disk (a fresh
    clone, say), and merge the committed ledger into the local one."""
    run_dir = f".gitrun/runs/{run_id}"
    tree = git.ls_tree(repo, tip, [run_dir, CONFIG_FILE])
    restored = 0
    for path, (_mode, sha) in tree.items():
        target = repo / path
        if path.endswith("/" + LEDGER_NAME):
            committed = git.cat_blob(repo, sha).decode("utf-8", errors="replace")
            local_text = target.read_text(encoding="utf-8") if target.exists() else ""
            merged = ledger.merge_text(local_text, committed)
            if merged != local_text:
                write_atomic(target, merged.encode())
        elif not target.exists():
            write_atomic(target, git.cat_blob(repo, sha))
            restored += 1
    if restored:
        report(f"run {run_id}: restored {restored} run files from the branch")


class Driver:
    def __init__(
        self,
        run: RunDef,
        local: LocalPaths,
        lock: RunLock,
        committer: Committer,
        report: Reporter,
    ) -> None:
        self.run = run
        self.repo = run.repo
        self.local = local
        self.lock = lock
        self.committer = committer
        self.report = report
        self.limits = run.packet.limits
        self.tasks = {task.id: task for task in run.tasks}
        self.ledger_path = self.repo / run.dir / LEDGER_NAME
        ledger.repair_tail(self.ledger_path)
        self.ledger = ledger.LineWriter(self.ledger_path)
        self.journal: ledger.LineWriter | None = None  # opened when driving starts
        summary = ledger.summarize(ledger.read_lines(self.ledger_path))
        self.history = {tid: summary.of(tid) for tid in self.tasks}
        tip = git.rev_parse(self.repo, committer.ref)
        done = committed_tasks(run, tip, find_base(self.repo, run.id)) if tip else set()
        self.status: dict[str, str] = {}
        self.queues: dict[str, deque[str]] = {stage: deque() for stage in run.stage_names}
        # Tasks per stage still pending or running: a stage starts when the one
        # before it has none.
        self.open: dict[str, int] = dict.fromkeys(run.stage_names, 0)
        for task in run.tasks:
            if task.id in done:
                self.status[task.id] = "done"
            elif self.history[task.id].used >= self.limits.max_attempts:
                self.status[task.id] = "failed"
            else:
                self.status[task.id] = "pending"
                self.open[run.stage_of(task)] += 1
                self.queues[run.stage_of(task)].append(task.id)
        self.running: dict[str, Attempt] = {}
        self.before: dict[str, dict[str, str | None]] = {}
        self.monitor = Monitor()
        self.base_env = clean_env()
        self.made_dirs: set[Path] = set()
        self.stop_signal: int | None = None
        self.stopping = False
        self.template = command_template(run.packet.executor)

    # -- before driving -----------------------------------------------------------

    def recover_orphans(self) -> None:
        """Stop workers a dead driver left running and record their attempts."""
        records = running_records(self.local)
        for tid, record in records.items():
            _kill_recorded_group(record)
            task = self.tasks.get(tid)
            number = int(record.get("attempt", 0))
            if task is not None:
                prior = record.get("before") or {}
                check = check_task(self.run, task, prior, self.committer.object_format)
                outcome = "valid" if check.outcome == "valid" else ledger.ABANDONED
                if check.outcome == "invalid":
                    quarantine(self.repo, self.local.quarantine_of(tid, number), check.outputs)
                self._record(
                    tid,
                    number,
                    float(record.get("started", time.time())),
                    time.time(),
                    None,
                    None,
                    False,
                    outcome,
                    check.reason if outcome != "valid" else "",
                )
                self.report(
                    f"{tid} attempt {number}: left running by a dead driver; stopped ({outcome})"
                )

    def reconcile(self) -> None:
        """Commit valid outputs already on disk; quarantine invalid ones."""
        base = find_base(self.repo, self.run.id)
        at_base = git.ls_tree(self.repo, base) if base else {}
        landings: list[Landing] = []
        for tid, status in self.status.items():
            if status == "done":
                continue
            task = self.tasks[tid]
            prior = {
                o.path: at_base[o.path][1] if o.path in at_base else None
                for o in self.run.outputs_of(task)
            }
            check = check_task(self.run, task, prior, self.committer.object_format)
            history = self.history[tid]
            if check.outcome == "valid":
                landings.append(Landing(tid, history.attempts, check.outputs))
                self._mark_done(tid)
            elif check.outcome == "invalid":
                moved = quarantine(
                    self.repo, self.local.quarantine_of(tid, history.attempts), check.outputs
                )
                self.report(f"{tid}: quarantined {', '.join(moved)} ({check.reason})")
        if landings:
            self.committer.commit(
                landings, self._own_files(), landing_message(self.run.id, landings)
            )
            self.report(
                f"reconciled: committed {len(landings)} tasks whose valid outputs were on disk"
            )

    # -- the loop ---------------------------------------------------------------------

    def drive(self) -> RunOutcome:
        # Orphans are handled (recover_orphans) before a new journal begins.
        self.local.running.unlink(missing_ok=True)
        self.journal = ledger.LineWriter(self.local.running)
        commits = CommitQueue(self.committer, self._own_files, self._on_commit)
        last_beat = time.time()
        with _signals_to(self._on_signal):
            try:
                while True:
                    if self.stop_signal is not None and not self.stopping:
                        self.stopping = True
                        self.report(
                            f"stopping ({signal.Signals(self.stop_signal).name}): terminating {len(self.running)} attempts"
                        )
                        for attempt in self.running.values():
                            attempt.stop()
                    if commits.error is not None and not self.stopping:
                        self.stopping = True
                        for attempt in self.running.values():
                            attempt.stop()
                    if not self.stopping:
                        self._launch_ready()
                    if not self.running:
                        break
                    self._wait_and_finish(commits)
                    now = time.time()
                    for attempt in self.running.values():
                        if now >= attempt.deadline:
                            attempt.expire()
                        attempt.escalate(now)
                    if now - last_beat >= HEARTBEAT:
                        self.lock.beat()
                        last_beat = now
            finally:
                for attempt in self.running.values():
                    attempt.stop()
                commits.flush()
                commits.close()
                self.journal.close()
                self.ledger.close()
        if commits.error is not None:
            raise commits.error
        status = read_status(self.repo, self.run.id, self.run)
        counts = status.counts()
        if self.stop_signal is not None:
            code = 128 + self.stop_signal
            stopped = signal.Signals(self.stop_signal).name
        else:
            code = 0 if counts["done"] == len(self.tasks) else 1
            stopped = None
        return RunOutcome(status, code, stopped)

    def _wait_and_finish(self, commits: CommitQueue) -> None:
        next_event = min(a.next_event for a in self.running.values())
        timeout = max(0.0, min(TICK, next_event - time.time()))
        for end in self.monitor.poll(timeout):
            self._finish(end, commits)

    def _mkdir(self, path: Path) -> None:
        if path not in self.made_dirs:
            path.mkdir(parents=True, exist_ok=True)
            self.made_dirs.add(path)

    def _current_stage(self) -> str | None:
        return next((stage for stage in self.run.stage_names if self.open[stage]), None)

    def _set_status(self, tid: str, status: str) -> None:
        old = self.status[tid]
        stage = self.run.stage_of(self.tasks[tid])
        self.open[stage] += (status in ("pending", "running")) - (old in ("pending", "running"))
        self.status[tid] = status

    def _launch_ready(self) -> None:
        if len(self.running) >= self.limits.concurrency:
            return
        stage = self._current_stage()
        if stage is None:
            return
        pending = self.queues[stage]
        while pending and len(self.running) < self.limits.concurrency:
            tid = pending.popleft()
            if self.status[tid] == "pending":
                self._launch(self.tasks[tid])

    def _launch(self, task: Task) -> None:
        history = self.history[task.id]
        history.attempts += 1
        number = history.attempts
        outputs = [o.path for o in self.run.outputs_of(task)]
        before = {
            path: _blob_on_disk(self.repo / path, self.committer.object_format) for path in outputs
        }
        self.before[task.id] = before
        for path in outputs:  # workers should not have to create the directories
            self._mkdir((self.repo / path).parent)
        stage = self.run.stage_of(task)
        pointer = render_pointer(self.run, task)
        values = {
            "pointer": pointer,
            "task": task.id,
            "run": self.run.id,
            "model": self.run.packet.model_for(stage),
            "packet": self.run.packet_path,
            "attempt": str(number),
            "outputs": "\n".join(outputs),
            "stage": stage,
        }
        assert self.template is not None  # check_run refuses a command executor without one
        argv = render_command(self.template, values)
        env = dict(self.base_env)
        env.update({f"GITRUN_{k.upper()}": v for k, v in values.items()})
        env.update(self.run.packet.executor.env)
        log = self.local.log_of(task.id, number)
        self._mkdir(log.parent)
        attempt = self.monitor.launch(
            task.id, number, argv, env, self.repo, log, self.limits.timeout
        )
        self.running[task.id] = attempt
        self._set_status(task.id, "running")
        if attempt.proc is not None:
            assert self.journal is not None
            self.journal.write(
                {
                    "task": task.id,
                    "attempt": number,
                    "pid": attempt.pid,
                    "create_time": _create_time(attempt.pid),
                    "started": attempt.started,
                    "before": before,
                },
            )
        self.report(f"{task.id} attempt {number}: started")

    def _finish(self, end: AttemptEnd, commits: CommitQueue) -> None:
        self.running.pop(end.task, None)
        task = self.tasks[end.task]
        check = check_task(
            self.run, task, self.before.pop(end.task, None), self.committer.object_format
        )
        outcome = check.outcome
        if outcome == "invalid":
            quarantine(self.repo, self.local.quarantine_of(end.task, end.attempt), check.outputs)
        if outcome != "valid" and end.stopped and not end.timed_out:
            outcome = ledger.INTERRUPTED
        how = f"signal {end.signal}" if end.signal else f"exit {end.exit_code}"
        if end.timed_out:
            how += ", timed out"
        self._record(
            end.task,
            end.attempt,
            end.started,
            end.ended,
            end.exit_code,
            end.signal,
            end.timed_out,
            outcome,
            check.reason,
        )
        assert self.journal is not None
        self.journal.write({"task": end.task, "attempt": end.attempt, "end": True})
        if outcome == "valid":
            self._mark_done(end.task)
            commits.put(Landing(end.task, end.attempt, check.outputs))
            self.report(f"{end.task} attempt {end.attempt}: valid ({how}, {end.duration:.1f} s)")
            return
        history = self.history[end.task]
        if history.used >= self.limits.max_attempts:
            self._set_status(end.task, "failed")
            verdict = f"failed for good after {history.used} attempts"
        else:
            self._set_status(end.task, "pending")
            self.queues[self.run.stage_of(task)].append(end.task)
            verdict = "will retry" if outcome in ledger.COUNTED else "pending"
        detail = f": {check.reason}" if check.reason else ""
        self.report(f"{end.task} attempt {end.attempt}: {outcome} ({how}){detail} — {verdict}")

    def _record(
        self,
        tid: str,
        number: int,
        started: float,
        ended: float,
        exit_code: int | None,
        sig: int | None,
        timed_out: bool,
        outcome: str,
        reason: str,
    ) -> None:
        record: dict[str, Any] = {
            "task": tid,
            "attempt": number,
            "stage": self.run.stage_of(self.tasks[tid]) if tid in self.tasks else None,
            "started": _iso(started),
            "ended": _iso(ended),
            "duration": round(ended - started, 3),
            "exit": exit_code,
            "signal": sig,
            "timed_out": timed_out,
            "outcome": outcome,
        }
        if reason:
            record["reason"] = reason
        self.ledger.write(record)
        history = self.history.setdefault(tid, ledger.TaskHistory())
        history.attempts = max(history.attempts, number)
        history.spawns += 1
        if outcome in ledger.COUNTED:
            history.used += 1
        history.last_outcome = outcome
        history.last_reason = reason or None

    def _mark_done(self, tid: str) -> None:
        self._set_status(tid, "done")

    def _own_files(self) -> dict[str, bytes]:
        files = definition_files(self.run)
        files.pop(CONFIG_FILE, None)
        return files

    def _on_commit(self, committed: Committed) -> None:
        if committed.tasks:
            self.report(f"committed {', '.join(committed.tasks)} as {committed.commit[:10]}")

    def _on_signal(self, signum: int) -> None:
        self.stop_signal = signum


def _blob_on_disk(path: Path, object_format: str) -> str | None:
    try:
        if path.is_symlink() or not path.is_file():
            return None
        return blob_id(path.read_bytes(), object_format)
    except OSError:
        return None


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def _create_time(pid: int) -> float | None:
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def _kill_recorded_group(record: dict[str, Any]) -> None:
    """SIGKILL the process group of a recorded attempt, if it is still the same process."""
    import psutil

    pid = record.get("pid")
    if not isinstance(pid, int):
        return
    try:
        proc = psutil.Process(pid)
        if (
            record.get("create_time") is not None
            and abs(proc.create_time() - record["create_time"]) > 0.01
        ):
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
        time.sleep(0.02)


@contextmanager
def _signals_to(handler: Callable[[int], None]) -> Iterator[None]:
    """Route SIGINT and SIGTERM to ``handler`` while driving (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, lambda signum, _frame: handler(signum))
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
