"""Fan-out protection with real child processes: throttles, breaker, canary,
budgets, halt policy, stray writes, the load gate and the watchdog."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gitrun.commands.session import resume_run, start_run
from gitrun.commands.watchdog import inspect_runs
from gitrun.definition.load import load_run
from gitrun.definition.schema import Limits
from gitrun.engine import governor
from gitrun.engine.governor import EndFacts, Governor
from gitrun.engine.states import load_engine
from gitrun.store.local import LocalPaths
from gitrun.workers.sandbox import probe as sandbox_refusal
from tests.forkserver import run_gitrun_call
from tests.helpers import (
    build_tree,
    commit_all,
    fake_worker_run,
    git,
    ledger_records,
    spawn_events,
    wait_for,
    wait_until,
    write_run,
)

quiet = lambda _line: None  # noqa: E731


def _ledger(repo: Path) -> list[dict[str, object]]:
    return ledger_records(repo)


def test_throttled_workers_back_off_and_shrink_concurrency(git_repo: Path, tmp_path: Path) -> None:
    spec = {
        "default": "crowd",
        "crowd_dir": str(tmp_path / "crowd"),
        "crowd_limit": 2,
        "sleep": 0.3,  # long enough that three overlap whatever the load
    }
    limits = {"concurrency": 4, "backoff_base": "0.05s", "backoff_cap": "0.5s", "max_attempts": 2}
    fake_worker_run(git_repo, "r", 16, spec, {"limits": limits})
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 0
    assert outcome.status.counts()["failed"] == 0
    records = [r for r in _ledger(git_repo) if "outcome" in r]
    throttled = [r for r in records if r["outcome"] == "throttled"]
    assert throttled, "the crowd never formed"
    assert min(int(r["concurrency"]) for r in throttled) < 4  # type: ignore[call-overload]
    # Throttles used up no attempts: no task saw a second counted failure.
    assert all(r["outcome"] in ("valid", "throttled") for r in records)
    # Nor attempt numbers: every try is attempt 1, told apart by the throttles before it.
    assert {r["attempt"] for r in records} == {1}
    for task in {r["task"] for r in records}:
        tries = [r.get("throttles", 0) for r in records if r["task"] == task]
        assert tries == list(range(len(tries))), (task, tries)
    trailers = git(
        git_repo, "log", "--format=%(trailers:key=Gitrun-Attempt,valueonly)", "gitrun/r"
    ).split()
    assert len(trailers) == 16 and all(t.endswith("=1") for t in trailers), trailers


def test_each_bucket_s_concurrency_its_ceiling_and_why_are_recorded_and_shown(
    git_repo: Path, tmp_path: Path
) -> None:
    """A real run against a crowd that takes two at once: the ledger records
    each change of the bucket's concurrency, and status, --json and the
    report show the bucket's concurrency, its ceiling estimate and why."""
    spec = {
        "default": "crowd",
        "crowd_dir": str(tmp_path / "crowd"),
        "crowd_limit": 2,
        "sleep": 0.3,  # three overlap whatever the load
    }
    limits = {"concurrency": 4, "backoff_base": "0.05s", "backoff_cap": "0.5s", "max_attempts": 2}
    fake_worker_run(git_repo, "r", 12, spec, {"limits": limits, "model": {"default": "m-small"}})
    assert start_run(git_repo, "r", quiet).exit_code == 0
    changes = [r for r in _ledger(git_repo) if r.get("event") == "concurrency"]
    assert changes, "no change of concurrency was recorded"
    assert {r["bucket"] for r in changes} == {"command/m-small"}
    assert any(str(r["reason"]).startswith("throttled at") for r in changes)
    shown = subprocess.run(
        [sys.executable, "-m", "gitrun", "status", "r", "--json"],
        cwd=git_repo, capture_output=True, text=True, check=True,
    )  # fmt: skip
    (bucket,) = json.loads(shown.stdout)["buckets"]
    assert bucket["bucket"] == "command/m-small" and bucket["reason"] == changes[-1]["reason"]
    assert bucket["concurrency"] == changes[-1]["concurrency"] and bucket["ceiling"]
    text = subprocess.run(
        [sys.executable, "-m", "gitrun", "status", "r"],
        cwd=git_repo, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert f"model bucket command/m-small: concurrency {bucket['concurrency']}" in text
    report = tmp_path / "report.html"
    subprocess.run(
        [sys.executable, "-m", "gitrun", "report", "r", "-o", str(report)],
        cwd=git_repo, capture_output=True, text=True, check=True,
    )  # fmt: skip
    page = report.read_text()
    assert "halved at each throttle" not in page
    assert "<code>command/m-small</code>" in page and "why it last changed" in page
    # A later driver's bucket starts where the ledger left it.
    engine, _tip = load_engine(load_run(git_repo, "r"), LocalPaths.of(git_repo, "r"))
    assert engine.governor.bucket("work").concurrency == bucket["concurrency"]


def test_missing_executor_trips_the_breaker_after_exactly_its_window(git_repo: Path) -> None:
    tasks = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(10)]
    # An agent that starts and fails at once, the same way, every time.
    build_tree(
        git_repo,
        {"bin/agent": "#!/bin/sh\necho 'agent: cannot load its config' >&2\nexit 127\n"},
    )
    (git_repo / "bin/agent").chmod(0o755)
    packet = {
        "executor": {"command": ["bin/agent", "-p", "{pointer}"]},
        "limits": {"canary": 0, "concurrency": 4, "max_attempts": 5},
    }
    write_run(git_repo, "r", tasks, packet)
    commit_all(git_repo, "the agent and its run")  # a worker's own file is committed
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 3
    assert outcome.halt is not None and outcome.halt.kind == governor.ENVIRONMENT
    assert outcome.halt.message.startswith("environment fault: 4 of 4 attempts exited within")
    assert "status 127" in outcome.halt.message
    assert "agent: cannot load its config" in outcome.halt.message
    assert outcome.status.spawns == 4


def test_canary_that_never_validates_halts_before_the_fan_out(
    git_repo: Path, tmp_path: Path
) -> None:
    spec = {"tasks": {"t01": "invalid"}, "spawn_log": str(tmp_path / "spawns.log")}
    spec_path = fake_worker_run(git_repo, "r", 8, spec, {"limits": {"max_attempts": 2}})
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 3
    assert outcome.halt is not None and outcome.halt.kind == governor.CANARY
    assert "canary failed: t01 used up its attempts" in outcome.halt.message
    assert {t for t, _, _, _ in spawn_events(spec_path)} == {"t01"}
    assert outcome.status.spawns == 2


def test_canary_passes_then_the_fan_out_widens(git_repo: Path, tmp_path: Path) -> None:
    spec = {"sleep": 0.2, "spawn_log": str(tmp_path / "spawns.log")}
    spec_path = fake_worker_run(git_repo, "r", 6, spec, {"limits": {"concurrency": 3}})
    assert start_run(git_repo, "r", quiet).exit_code == 0
    events = spawn_events(spec_path)
    t01_wrote = next(at for t, _, e, at in events if t == "t01" and e == "wrote")
    others = [at for t, _, e, at in events if t != "t01" and e == "start"]
    assert min(others) > t01_wrote


def test_the_fan_out_widens_once_the_canary_s_outputs_validate(git_repo: Path) -> None:
    """The canary writes its output, then spends 4 s on a summary turn: the
    other tasks start when its output validates, not when it exits."""
    spec = {"after": {"t01": 4.0}}
    fake_worker_run(git_repo, "r", 4, spec, {"limits": {"canary": 1}}, isolation="none")
    assert start_run(git_repo, "r", quiet).exit_code == 0
    attempts = {str(r["task"]): r for r in _ledger(git_repo) if "outcome" in r}
    canary_ended = str(attempts["t01"]["ended"])
    assert all(str(attempts[t]["started"]) < canary_ended for t in ("t02", "t03", "t04"))


def test_a_resumed_run_s_first_wave_goes_at_what_its_bucket_knew(git_repo: Path) -> None:
    limits = Limits(concurrency=8)
    gov = Governor(limits, tasks=40, spawns=0, canary=[], stage_buckets={"work": "claude/m"})
    gov.buckets.keyed("claude/m").seed(5, 6)  # as the ledger left it
    gov.started("c", now=0.0)
    _valid(gov, "c", 0.0, now=1.0)  # a typical attempt's time is known: pacing applies
    assert gov.slots(0, now=1.0, stage="work") == 5 and gov.held == ""
    assert gov.congestion.ceiling == 6


def test_a_spawn_budget_spent_on_refusals_names_them_as_its_cause() -> None:
    """Refusals use no attempt but are spawns: a limit that does not lift
    spends the budget, and the halt names it, with what the API said last."""
    said = "You've hit your usage limit · resets 3am"
    gov = Governor(Limits(concurrency=1), tasks=2, spawns=0, canary=[])  # budget 6
    gov.started("t1", now=0.0)
    gov.ended(EndFacts("t1", "missing", 5.0, 0, None, True, "done"), now=5.0)
    for i in range(4):
        gov.started("t2", now=10.0 + i)
        gov.ended(EndFacts("t2", "throttled", 0.1, 1, None, True, said), now=10.1 + i)
    gov.started("t2", now=20.0)
    assert gov.halt is not None
    assert gov.halt.message == (
        "retry storm: 6 spawns for 0 usable outputs (max_spawns 6); the API refused the "
        f"last 4 attempts that ended (last: `{said}`): its limit has not lifted; once it "
        "has, raise limits.max_spawns (or GITRUN_MAX_SPAWNS) to continue"
    )
    # Failures of the task's own are no refusal: the cause is then not named.
    other = Governor(Limits(concurrency=1), tasks=1, spawns=0, canary=[])  # budget 3
    for i in range(3):
        other.started("t1", now=float(i))
        if i < 2:
            other.ended(
                EndFacts("t1", "throttled" if i == 0 else "missing", 5.0, 0, None, True, ""),
                now=i + 0.5,
            )
    assert other.halt is not None
    assert "find the cause in the ledger and logs" in other.halt.message


def test_a_usage_limit_that_never_lifts_halts_as_such(git_repo: Path) -> None:
    """A real worker refused every time by a usage limit whose stated reset
    has passed (a clock ahead of the server's): the run parks between tries
    and, its spawn budget spent, halts naming the refusals, not its tasks;
    a resume says the same."""
    said = 'You\'ve hit your usage limit {"resetsAt": 1700000000}'
    script = f"import sys; sys.stderr.write({said!r} + '\\n'); sys.exit(1)"
    command = [sys.executable, "-c", script, "{pointer}"]
    limits = {"max_spawns": 3, "park_default": "1s", "canary": 1}
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {
            "executor": {"kind": "command", "command": command, "isolation": "none"},
            "limits": limits,
        },
    )
    commit_all(git_repo, "the run")
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 3
    assert outcome.halt is not None
    message = outcome.halt.message
    assert message.startswith("retry storm: 3 spawns for 0 usable outputs (max_spawns 3); ")
    assert "the API refused the last 2 attempts that ended" in message, message
    assert "You've hit your usage limit" in message
    assert "its limit has not lifted" in message
    # A driver rebuilt from the ledger (a resume, each call of external
    # dispatch, status) names them too: the run of refusals is the ledger's.
    again = resume_run(git_repo, "r", quiet)
    assert again.exit_code == 3 and again.halt is not None
    assert "the API refused the last 3 attempts that ended" in again.halt.message
    assert "You've hit your usage limit" in again.halt.message


def test_spawn_budget_halts_with_the_numbers(git_repo: Path) -> None:
    limits = {"canary": 0, "max_spawns": 5, "concurrency": 1, "max_attempts": 3}
    fake_worker_run(git_repo, "r", 10, {"default": "invalid"}, {"limits": limits})
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 3
    assert outcome.halt is not None
    assert outcome.halt.message.startswith("retry storm: 5 spawns for 0 usable outputs")
    assert outcome.status.spawns == 5
    # Resuming does not spend past the budget either.
    again = resume_run(git_repo, "r", quiet)
    assert again.exit_code == 3 and again.status.spawns == 5


def test_halt_policy_stops_new_starts(git_repo: Path) -> None:
    limits = {"canary": 0, "concurrency": 1, "max_attempts": 1, "halt": "fail=2"}
    fake_worker_run(git_repo, "r", 10, {"default": "invalid"}, {"limits": limits})
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 3
    assert outcome.halt is not None
    assert outcome.halt.message == "halt policy fail=2: 2 of 10 tasks failed for good"
    assert outcome.status.spawns == 2


def test_a_worker_writing_gitruns_own_directory_is_a_violation(git_repo: Path) -> None:
    """Only the files gitrun itself writes are exempt from the audit, not all of .gitrun/."""
    spec = {"tasks": {"t02": "stray"}, "stray_path": ".gitrun/config.toml"}
    fake_worker_run(git_repo, "r", 2, spec, {"limits": {"concurrency": 1}}, isolation="none")
    outcome = start_run(git_repo, "r", quiet)
    assert [v.path for v in outcome.violations] == [".gitrun/config.toml"]
    assert ".gitrun/config.toml" not in git(git_repo, "ls-tree", "-r", "--name-only", "gitrun/r")


@pytest.mark.parametrize("strict", [False, True])
def test_writes_outside_owns_are_violations_never_committed(git_repo: Path, strict: bool) -> None:
    limits = {"concurrency": 1}
    packet = {"limits": limits, "ownership": {"strict": strict}}
    fake_worker_run(git_repo, "r", 4, {"tasks": {"t02": "stray"}}, packet, isolation="none")
    outcome = start_run(git_repo, "r", quiet)
    [violation] = outcome.violations
    assert violation.path == "stray/t02.txt"
    assert "t02" in violation.tasks
    committed = git(git_repo, "log", "--format=", "--name-only", "HEAD..gitrun/r")
    assert "stray/" not in committed
    assert any(r.get("event") == "violation" for r in _ledger(git_repo))
    if strict:
        assert outcome.exit_code == 3
        assert outcome.halt is not None and outcome.halt.kind == governor.STRICT
        assert outcome.status.counts()["done"] < 4
    else:
        assert outcome.exit_code == 0


@pytest.mark.parametrize("strict", [False, True])
def test_a_confined_worker_s_write_outside_its_paths_fails_at_once(
    git_repo: Path, strict: bool
) -> None:
    """Confined, the same careless worker cannot write outside its paths at
    all: its write fails with the file system's error, nothing reaches the
    work tree, there is no violation to halt for, and every task is done."""
    if sandbox_refusal() is not None:
        pytest.skip(sandbox_refusal())
    packet = {"limits": {"concurrency": 1}, "ownership": {"strict": strict}}
    spec = {"tasks": {"t02": "stray"}, "stray_path": ".gitrun/config.toml"}
    fake_worker_run(git_repo, "r", 4, spec, packet, isolation="sandbox")
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 0 and outcome.violations == []
    assert outcome.status.counts()["done"] == 4
    assert not (git_repo / ".gitrun/config.toml").exists()
    log = (git_repo / ".git/gitrun/r/logs/t02.1.log").read_text()
    assert "Read-only file system" in log, log


def test_load_gate_holds_starts_while_the_machine_is_busy(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    readings = iter([99.0] * 2)  # busy for two looks (one start each), then idle
    monkeypatch.setattr(governor, "read_load", lambda: next(readings, 0.0))
    monkeypatch.delenv("GITRUN_MAX_LOAD")  # the packet's bound, not the suite's
    limits = {"max_load": 4.0, "canary": 0, "concurrency": 3}
    fake_worker_run(git_repo, "r", 3, {"sleep": 0.3}, {"limits": limits})
    seen: list[tuple[bool, int]] = []
    said: list[str] = []
    outcome = start_run(
        git_repo, "r", said.append, lambda p: seen.append((p.waiting_for_load, len(p.running)))
    )
    assert outcome.exit_code == 0
    held = [line for line in said if line.startswith("starts held")]
    assert held and "load average 99.0 is over max_load 4 ([limits] max_load or " in held[0]
    assert "GITRUN_MAX_LOAD changes it); one attempt at a time until it drops" in held[0]
    assert any("starts resume" in line for line in said)
    assert outcome.load_held > 0
    assert seen[0][0] is True
    assert all(running <= 1 for waiting, running in seen if waiting)  # one at a time


def test_the_load_gate_s_default_follows_the_cpu_count_and_its_line_names_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gitrun.definition.schema import Limits

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert Limits().load_bound() == 4.0
    assert Limits().load_bound_text() == (
        "max_load 4 (2 x 2 CPUs, the default; [limits] max_load or GITRUN_MAX_LOAD changes it)"
    )
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert Limits().load_bound() == 32.0
    assert Limits(max_load=7.5).load_bound_text() == (
        "max_load 7.5 ([limits] max_load or GITRUN_MAX_LOAD changes it)"
    )


def test_a_load_that_never_drops_slows_the_run_but_never_stalls_it(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(governor, "read_load", lambda: 99.0)
    monkeypatch.delenv("GITRUN_MAX_LOAD")  # the packet's bound, not the suite's
    spec = {"sleep": 0.2, "spawn_log": str(git_repo.parent / "spawns.log")}
    spec_path = fake_worker_run(git_repo, "r", 4, spec, {"limits": {"max_load": 4.0, "canary": 0}})
    # A deadline: a stalled driver gets SIGTERM (which it turns into a stop).
    deadline = threading.Timer(60, os.kill, (os.getpid(), signal.SIGTERM))
    deadline.start()
    try:
        outcome = start_run(git_repo, "r", quiet)
    finally:
        deadline.cancel()
    assert outcome.exit_code == 0, "the run stalled while the load stayed high"
    events = sorted((at, e) for _, _, e, at in spawn_events(spec_path))
    running = peak = 0
    for _, event in events:
        running += 1 if event == "start" else -1
        peak = max(peak, running)
    assert peak == 1  # one attempt at a time while the load is high


def test_sigstopped_driver_is_stale_and_watchdog_kill_lets_resume_finish(
    git_repo: Path, tmp_path: Path
) -> None:
    spec = {"sleep": 0.3, "spawn_log": str(tmp_path / "spawns.log")}
    spec_path = fake_worker_run(git_repo, "r", 6, spec, {"limits": {"concurrency": 2}})
    driver = subprocess.Popen(
        [sys.executable, "-m", "gitrun", "start", "r", "--quiet"],
        cwd=git_repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_until(
        driver,
        lambda: any(e == "wrote" for _, _, e, _ in spawn_events(spec_path)),
        30,
        what="a worker wrote its output",
    )
    os.kill(driver.pid, signal.SIGSTOP)
    try:
        wait_for(
            lambda: any(h.stale for h in inspect_runs(git_repo, stale_after=1.0)),
            10,
            what="the stopped driver's heartbeat grew older than 1 s",
        )
        check = run_gitrun_call(["watchdog", "--stale", "1s", "--json"], git_repo)
        assert check.returncode == 1, check.stderr
        [health] = json.loads(check.stdout)
        assert health["stale"] is True and health["pid"] == driver.pid
        assert "no heartbeat" in health["reason"]
        kill = run_gitrun_call(["watchdog", "--stale", "1s", "--kill"], git_repo)
        assert "gitrun resume r" in kill.stdout
        assert driver.wait(timeout=10) == -signal.SIGKILL
    finally:
        if driver.poll() is None:
            driver.kill()
    outcome = resume_run(git_repo, "r", quiet)
    assert outcome.exit_code == 0
    healthy = run_gitrun_call(["watchdog"], git_repo)
    assert healthy.returncode == 0, healthy.stdout


# --- the governor's arithmetic ----------------------------------------------------


def _facts(
    outcome: str, duration: float = 1.0, said: str = "", wrote_nothing: bool = True
) -> EndFacts:
    return EndFacts("t", outcome, duration, 1, None, wrote_nothing, said)


def _throttle(gov: Governor, task: str, started: float, now: float) -> None:
    gov.ended(EndFacts(task, "throttled", now - started, 1, None, True, "", started), now)


def _valid(gov: Governor, task: str, started: float, now: float) -> None:
    gov.ended(EndFacts(task, "valid", now - started, 0, None, False, "", started), now)


def test_one_decrease_per_congestion_event_to_just_under_the_load_refused() -> None:
    limits = Limits(concurrency=8, backoff_base=1.0, backoff_cap=5.0, grow_after=2)
    gov = Governor(limits, tasks=40, spawns=0, canary=[], rng=random.Random(1))
    for i in range(8):  # started together: one burst, each of level 8
        gov.started(f"t{i}", now=10.0)
    _throttle(gov, "t0", 10.0, now=10.1)
    assert (gov.congestion.ceiling, gov.concurrency) == (8, 7)
    waited = gov.backoff_until
    assert 10.1 <= waited <= 10.1 + 0.2  # the ceiling found: a short wait, two throttles long
    _throttle(gov, "t1", 10.0, now=10.2)  # started before the decrease: the same event
    assert (gov.congestion.ceiling, gov.concurrency, gov.backoff_until) == (8, 7, waited)
    # Just under the ceiling, concurrency stays; a probe goes above it after
    # FOUND_WAIT x grow_after task durations (a ceiling found on the way up).
    for i in range(2, 8):
        _valid(gov, f"t{i}", 10.0, now=11.0)
    assert gov.slots(0, now=12.0) and gov.concurrency == 7
    assert gov.congestion.probe_at == pytest.approx(10.1 + 8 * 2 * 1.0)
    gov.slots(0, now=26.2)
    assert gov.concurrency == 8  # the probe
    for i in range(7):
        gov.started(f"w{i}", now=30.0)
    gov.started("probe", now=31.0)
    _throttle(gov, "probe", 31.0, now=31.1)
    assert (gov.congestion.ceiling, gov.concurrency, gov.congestion.probe_failures) == (8, 7, 1)
    assert gov.backoff_until <= 31.1 + 0.2  # a failed probe: back under, a short wait
    # Refused at a level that worked: the API takes fewer now, and the bucket halves.
    for i in range(7):
        _valid(gov, f"w{i}", 30.0, now=32.0)
    for i in range(4):
        gov.started(f"x{i}", now=40.0)
    _throttle(gov, "x3", 40.0, now=40.1)
    assert (gov.congestion.ceiling, gov.concurrency) == (4, 2)
    assert 40.1 <= gov.backoff_until <= 40.1 + 0.2  # the first drop: a short wait
    gov.backoff_until = 0
    for i in range(3):
        _valid(gov, f"x{i}", 40.0, now=41.0)
    gov.started("y", now=50.0)
    _throttle(gov, "y", 50.0, now=50.1)  # refused alone: wait, and longer each time
    assert gov.concurrency == 1 and 50.1 <= gov.backoff_until <= 52.1


def test_starts_above_the_level_known_to_work_are_spaced_out() -> None:
    gov = Governor(Limits(concurrency=8), tasks=40, spawns=0, canary=[])
    gov.started("c", now=0.0)
    _valid(gov, "c", 0.0, now=1.6)  # the canary: 1.6 s, level 1
    gap = gov.congestion.pace_gap()
    assert gap == pytest.approx(0.1)  # BLIND_GAP: an eighth of 1.6 s is more
    # Level 1 works and goes at once, with one start above it.
    assert gov.slots(0, now=2.0) == 2 and gov.held == "pacing"
    gov.started("k1", now=2.0)
    gov.started("p1", now=2.0)
    assert gov.slots(2, now=2.05) == 0 and gov.next_wake(2.05) == pytest.approx(2.0 + gap)
    assert gov.slots(2, now=2.0 + gap) == 1
    gov.started("p2", now=2.0 + gap)
    # An attempt at a level that works ends and is replaced at once, and the
    # next start above it still waits its gap from the last one above.
    _valid(gov, "k1", 2.0, now=2.12)
    assert gov.slots(2, now=2.12) == 1
    gov.started("k2", now=2.12)
    assert gov.slots(3, now=2.15) == 0
    assert gov.slots(3, now=2.0 + 2 * gap) == 1
    # Once a throttle came back, the gap is a quarter longer than it took.
    gov.started("p3", now=2.2)
    _throttle(gov, "p3", 2.2, now=2.5)
    assert gov.congestion.pace_gap() == pytest.approx(1.25 * 0.3)


def test_a_climb_goes_on_however_often_attempts_end() -> None:
    """Climbing with ten attempts out of half a second each, one ending every
    twentieth of a second and replaced at once: the starts above the level
    known to work still go one per gap, up to the packet's concurrency."""
    gov = Governor(Limits(concurrency=16), tasks=10_000, spawns=0, canary=[])
    bucket = gov.congestion
    bucket.throttle_latency = bucket.throttle_slowest = 0.1  # a throttle came back once
    gap = gov.congestion.pace_gap()
    out = {f"w{i}": 0.05 * i for i in range(10)}
    for task, began in out.items():
        gov.started(task, began)
    now, number = 0.5, 0
    while now < 0.5 + 8 * gap:
        for task, began in [(t, b) for t, b in out.items() if now - b >= 0.5 - 1e-9]:
            del out[task]
            _valid(gov, task, began, now)
        for _ in range(gov.slots(len(out), now)):
            number += 1
            out[f"t{number}"] = now
            gov.started(f"t{number}", now)
        now = round(now + 0.01, 6)
    assert len(out) == 16


def test_breaker_needs_one_repeated_diagnostic() -> None:
    gov = Governor(Limits(concurrency=2), tasks=10, spawns=0, canary=[])
    gov.ended(_facts("missing", 0.1, "boom"), now=0)
    gov.ended(_facts("missing", 0.1, "something else"), now=0)
    gov.ended(_facts("missing", 0.1, "something else"), now=0)
    assert gov.halt is None  # the complaint changed: the streak restarted
    gov.ended(_facts("missing", 0.1, "something else"), now=0)
    assert gov.halt is not None and "3 of 3 attempts" in gov.halt.message
    slow = Governor(Limits(concurrency=2), tasks=10, spawns=0, canary=[])
    for _ in range(5):
        slow.ended(_facts("missing", 10.0, "boom"), now=0)
    assert slow.halt is None  # slow failures are the task's, not the environment's


def test_a_canary_halt_holds_every_resume_until_retry_lifts_it(git_repo: Path) -> None:
    limits = {"canary": 1, "max_attempts": 1}
    spec_path = fake_worker_run(git_repo, "r", 3, {"tasks": {"t01": "nowrite"}}, {"limits": limits})
    first = start_run(git_repo, "r", quiet)
    assert first.exit_code == 3 and first.halt is not None and first.halt.kind == governor.CANARY
    again = resume_run(git_repo, "r", quiet)
    assert again.exit_code == 3 and again.halt is not None
    assert again.status.spawns == 1  # no second canary was burned behind the halt
    from gitrun.commands.retry import retry_tasks

    spec = json.loads(spec_path.read_text())
    spec["tasks"] = {}
    spec_path.write_text(json.dumps(spec))  # "fix the executor"
    retried = retry_tasks(git_repo, "r", [])
    assert retried.tasks == ["t01"] and retried.lifted is not None
    assert resume_run(git_repo, "r", quiet).exit_code == 0
