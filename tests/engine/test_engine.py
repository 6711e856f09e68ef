"""The engine: task states from the branch, the ledger and what runs; what an ended attempt changes."""

from __future__ import annotations

from pathlib import Path

from gitrun.definition.load import RunDef, load_run
from gitrun.definition.outputs import check_task
from gitrun.definition.runfiles import definition_files
from gitrun.engine.committer import Committer, Landing
from gitrun.engine.governor import CANARY, Halt
from gitrun.engine.states import DONE, FAILED, PENDING, RUNNING, Ended, Engine, load_engine
from gitrun.store import ledger
from gitrun.store.leases import Lease, write_leases
from gitrun.store.local import LocalPaths
from tests.helpers import commit_all, git, ledger_records, write_run

TASKS = [
    {"id": "t1", "outputs": ["out/t1.json"]},
    {"id": "t2", "outputs": ["out/t2.json"]},
    {"id": "t3", "outputs": ["out/t3.json"]},
    {"id": "t4", "outputs": ["out/t4.json"]},
    {"id": "t5", "stage": "review", "outputs": ["out/t5.json"]},
]


def _started(repo: Path, executor: str = "command", canary: int = 1) -> tuple[RunDef, Committer]:
    packet = {
        "stages": [{"name": "work"}, {"name": "review"}],
        "limits": {"max_attempts": 2, "canary": canary},
    }
    if executor == "external":
        packet["executor"] = {"kind": "external"}
    write_run(repo, "r", TASKS, packet)
    commit_all(repo, "define r")
    run = load_run(repo, "r")
    committer = Committer(repo, "r", LocalPaths.of(repo, "r"))
    committer.start_branch(git(repo, "rev-parse", "HEAD").strip(), definition_files(run), "start")
    return run, committer


def _commit_output(repo: Path, run: RunDef, committer: Committer, tid: str) -> None:
    task = next(t for t in run.tasks if t.id == tid)
    (repo / "out").mkdir(exist_ok=True)
    (repo / f"out/{tid}.json").write_text('{"ok": true}')
    check = check_task(run, task, {f"out/{tid}.json": None}, committer.object_format)
    assert check.outcome == "valid", check.reason
    committer.commit([Landing(tid, 1, check.outputs)], definition_files(run), f"land {tid}")


def _end(engine: Engine, tid: str, attempt: int, outcome: str, throttles: int = 0) -> str:
    writer = ledger.LedgerWriter(engine.run.repo / engine.run.dir)
    try:
        ended = Ended(tid, attempt, 1.0, 2.0, outcome, "why", throttles=throttles)
        return engine.end(writer, ended)
    finally:
        writer.close()


def test_states_come_from_branch_ledger_and_leases(git_repo: Path) -> None:
    run, committer = _started(git_repo, "external")
    local = LocalPaths.of(git_repo, "r")
    _commit_output(git_repo, run, committer, "t1")
    engine, _tip = load_engine(run, local)
    assert _end(engine, "t2", 1, ledger.MISSING) == PENDING
    assert _end(engine, "t2", 2, ledger.INVALID) == FAILED
    write_leases(local, {"t3": Lease("t3", 1, 0.0, 1e12, {}, None)})

    engine, _tip = load_engine(run, local)  # everything read back from disk
    assert engine.status == {"t1": DONE, "t2": FAILED, "t3": RUNNING, "t4": PENDING, "t5": PENDING}
    assert engine.current_stage() == "work"  # t3 runs and t4 waits: review waits for them
    assert engine.pending() == ["t4"]
    assert engine.open_tasks() == ["t3", "t4"]
    assert engine.history["t2"].used == 2
    assert engine.governor.failed == 1 and engine.governor.usable == 1
    assert engine.governor.spawns == 3  # two recorded attempts and the lease out


def test_the_next_stage_starts_when_the_one_before_has_nothing_open(git_repo: Path) -> None:
    run, _committer = _started(git_repo)
    engine, _tip = load_engine(run, LocalPaths.of(git_repo, "r"))
    for tid in ("t1", "t2", "t3"):
        assert engine.history[tid].upcoming == (1, 0)
        engine.begin(tid)
        assert _end(engine, tid, 1, ledger.VALID) == DONE
    assert engine.current_stage() == "work"
    engine.begin("t4")
    assert engine.pending() == []  # t4 runs: nothing more to start in stage work
    _end(engine, "t4", 1, ledger.THROTTLED)  # no attempt used; back in the queue
    assert engine.history["t4"].used == 0 and engine.pending() == ["t4"]
    engine.begin("t4")
    _end(engine, "t4", 1, ledger.VALID, throttles=1)
    assert engine.current_stage() == "review" and engine.pending() == ["t5"]


def test_a_throttle_uses_no_attempt_number(git_repo: Path) -> None:
    run, _committer = _started(git_repo)
    local = LocalPaths.of(git_repo, "r")
    engine, _tip = load_engine(run, local)
    _end(engine, "t1", 1, ledger.THROTTLED)
    assert engine.history["t1"].upcoming == (1, 1)  # attempt 1 again, its second try
    _end(engine, "t1", 1, ledger.THROTTLED, throttles=1)
    _end(engine, "t1", 1, ledger.MISSING, throttles=2)
    assert engine.history["t1"].upcoming == (2, 0) and engine.history["t1"].used == 1
    # Read back from the disk: three records, three tries, each recorded once.
    again, _tip = load_engine(run, local)
    assert again.history["t1"].upcoming == (2, 0)
    writer = ledger.LedgerWriter(git_repo / run.dir)
    try:
        for throttles in (0, 1, 2):
            assert not again.record(writer, Ended("t1", 1, 1.0, 2.0, "x", throttles=throttles))
    finally:
        writer.close()
    records = [r for r in ledger_records(git_repo) if "attempt" in r]  # not the governor's
    tries = [(r["attempt"], r.get("throttles", 0)) for r in records]
    assert tries == [(1, 0), (1, 1), (1, 2)]


def test_a_ledger_that_numbered_each_throttle_goes_on_past_them() -> None:
    def upcoming(*records: tuple[int, str]) -> tuple[int, int]:
        summary = ledger.summarize(
            [{"task": "t", "attempt": n, "outcome": outcome} for n, outcome in records]
        )
        return summary.tasks["t"].upcoming

    assert upcoming((1, "throttled"), (2, "throttled"), (3, "valid")) == (4, 0)
    assert upcoming((1, "throttled"), (2, "throttled")) == (2, 1)  # never try (2, 0) again
    assert upcoming((1, "missing"), (1, "missing")) == (2, 0)
    assert upcoming((2, "missing"), (1, "throttled")) == (3, 0)


def test_an_attempt_is_recorded_once_whatever_calls_it_again(git_repo: Path) -> None:
    run, _committer = _started(git_repo)
    local = LocalPaths.of(git_repo, "r")
    engine, _tip = load_engine(run, local)
    engine.begin("t1")
    _end(engine, "t1", 1, ledger.MISSING)
    # A second process (a resume after a kill between the ledger write and the
    # journal's end record) reads the ledger and meets the same attempt again.
    again, _tip = load_engine(run, local)
    writer = ledger.LedgerWriter(git_repo / run.dir)
    try:
        assert not again.record(writer, Ended("t1", 1, 1.0, 2.0, ledger.ABANDONED))
        assert again.record(writer, Ended("t1", 2, 3.0, 4.0, ledger.ABANDONED))
    finally:
        writer.close()
    attempts = [(r["task"], r["attempt"]) for r in ledger_records(git_repo) if "attempt" in r]
    assert attempts == [("t1", 1), ("t1", 2)]


def test_one_canary_rule_skips_tasks_done_or_failed(git_repo: Path) -> None:
    run, _committer = _started(git_repo, canary=2)
    engine, _tip = load_engine(run, LocalPaths.of(git_repo, "r"))
    _end(engine, "t1", 1, ledger.MISSING)
    _end(engine, "t1", 2, ledger.MISSING)  # failed for good
    assert engine.choose_canary() == ["t2", "t3"]  # the open tasks of the current stage
    _end(engine, "t2", 1, ledger.VALID)
    assert engine.choose_canary() == []  # something validated: no canary


def test_a_persistent_halt_is_recorded_once_and_holds_the_next_engine(git_repo: Path) -> None:
    run, _committer = _started(git_repo)
    local = LocalPaths.of(git_repo, "r")
    engine, _tip = load_engine(run, local)
    engine.governor.stop_for(Halt(CANARY, "canary failed"))
    writer = ledger.LedgerWriter(git_repo / run.dir)
    try:
        engine.record_halt(writer)
        engine.record_halt(writer)
    finally:
        writer.close()
    assert [r["event"] for r in ledger_records(git_repo) if "event" in r] == ["halt"]
    engine, _tip = load_engine(run, local)
    assert engine.governor.halt == Halt(CANARY, "canary failed")
