"""External dispatch end to end: next -> fake agents -> collect, until done."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from pytest import MonkeyPatch

from tests.forkserver import run_gitrun_call
from tests.helpers import FAKE_WORKER, git, write_run


def _gitrun(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_gitrun_call(list(args), repo)


def _dispatch(repo: Path, spec: Path, batch: list[dict[str, object]]) -> None:
    """Run one fake agent per leased task, in parallel, as an orchestrator would."""
    agents = []
    for item in batch:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GITRUN_")}
        outputs = item["outputs"]
        assert isinstance(outputs, list)
        env.update(
            GITRUN_TASK=str(item["task"]),
            GITRUN_ATTEMPT=str(item["attempt"]),
            GITRUN_OUTPUTS="\n".join(str(o) for o in outputs),
        )
        agents.append(
            subprocess.Popen(
                [sys.executable, str(FAKE_WORKER), str(spec)],
                cwd=repo,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    for agent in agents:
        agent.wait()  # whatever they report


def test_next_collect_loop_until_done(git_repo: Path, tmp_path: Path) -> None:
    tasks = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, 9)]
    write_run(
        git_repo, "r", tasks, {"executor": {"kind": "external"}, "limits": {"concurrency": 4}}
    )
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "tasks": {
                    "t2": "write_then_fail",
                    "t3": "nowrite_then_write",
                    "t4": "invalid_then_write",
                    "t5": "nowrite_then_write",
                },
                "spawn_log": str(tmp_path / "spawns.log"),
            }
        )
    )
    started = _gitrun(git_repo, "start", "r", "--json", "--full")
    assert started.returncode == 0, started.stderr
    batch = json.loads(started.stdout)["leased"]
    assert [b["task"] for b in batch] == ["t1"]  # the canary, alone
    assert batch[0]["pointer"].count("\n") == 1
    handed: list[list[str]] = []
    collected_done: set[str] = set()
    throttled_once = False
    for _ in range(20):
        names_now = [str(b["task"]) for b in batch]
        assert not collected_done & set(names_now), (names_now, collected_done)
        handed.append(names_now)
        _dispatch(git_repo, spec, batch)
        # t5's first attempt is reported by its agent as rate-limited.
        throttle = ["t5"] if not throttled_once and any(b["task"] == "t5" for b in batch) else []
        throttled_once = throttled_once or bool(throttle)
        args = ["collect", "r", "--json", "--full"] + [
            a for t in throttle for a in ("--throttled", t)
        ]
        collected = _gitrun(git_repo, *args)
        assert collected.returncode == 0, collected.stderr
        result = json.loads(collected.stdout)
        collected_done |= set(result["done"])
        if throttle:
            assert result["throttled"] == ["t5"]
        nxt = _gitrun(git_repo, "next", "r", "--json", "--full")
        assert nxt.returncode == 0, nxt.stdout + nxt.stderr  # waiting is no error
        got = json.loads(nxt.stdout)
        if got["done"]:
            assert "every task is done" in got["reason"] and got["leased"] == []
            break
        batch = got["leased"]
        if not batch:  # backing off after the throttle
            assert got["why"] == "throttled" and 0 < got["wait_s"] <= 60, got
            import time

            time.sleep(got["wait_s"] + 0.5)
            batch = json.loads(_gitrun(git_repo, "next", "r", "--json", "--full").stdout)["leased"]
        if throttle:
            throttle_batch = len(batch)
    else:
        raise AssertionError(f"never finished: {handed}")

    # The ones that wrote nothing or garbage came back once; the others never.
    counts = Counter(t for r in handed for t in r)
    assert counts["t3"] == 2 and counts["t4"] == 2
    assert counts["t5"] >= 2  # throttled once, then nothing, then valid
    assert counts["t2"] == 1  # wrote, then reported failure: done
    # The throttle shrank the batch after it: just under the load the API refused.
    assert throttle_batch <= 3
    # Everything committed exactly once.
    names = git(git_repo, "log", "--format=", "--name-only", "HEAD..gitrun/r").split()
    per_path = Counter(n for n in names if n.startswith("out/"))
    assert per_path == Counter({f"out/t{i}.json": 1 for i in range(1, 9)})
    status = json.loads(_gitrun(git_repo, "status", "r", "--json").stdout)
    assert status["counts"]["done"] == 8


def test_next_refuses_command_runs_and_explains_an_unstarted_run(git_repo: Path) -> None:
    write_run(git_repo, "c", [{"id": "t1", "outputs": ["a.json"]}])
    proc = _gitrun(git_repo, "next", "c")
    assert proc.returncode == 1 and "gitrun start c" in proc.stderr
    write_run(
        git_repo, "e", [{"id": "t1", "outputs": ["a.json"]}], {"executor": {"kind": "external"}}
    )
    proc = _gitrun(git_repo, "next", "e")
    assert proc.returncode == 1 and "has not started" in proc.stderr


def test_next_names_the_one_worker_agent_and_writes_no_agent_files(git_repo: Path) -> None:
    """Per-task agent files are retired: a file written during the
    lead's turn is not found in that turn, and in -p mode never."""
    write_run(
        git_repo,
        "e",
        [{"id": "t1", "outputs": ["a.json"]}, {"id": "t2", "outputs": ["b.json"]}],
        {"executor": {"kind": "external"}, "limits": {"canary": 0}},
    )
    started = _gitrun(git_repo, "start", "e", "--json")
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout)["agent"] == "gitrun:gitrun-worker"  # the plugin's, once
    assert not (git_repo / ".claude/agents").exists()
    assert _gitrun(git_repo, "next", "e", "--agents").returncode == 2  # the option is gone


def test_resume_in_external_mode_collects_and_hands_out_the_next_batch(git_repo: Path) -> None:
    tasks = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, 4)]
    write_run(git_repo, "e", tasks, {"executor": {"kind": "external"}, "limits": {"canary": 0}})
    assert _gitrun(git_repo, "start", "e").returncode == 0
    (git_repo / "out/t2.json").write_text('{"ok": true}')  # one subagent finished before the pause
    proc = _gitrun(git_repo, "resume", "e")
    assert proc.returncode == 0, proc.stderr
    assert "done: t2" in proc.stdout
    assert "task t1" in proc.stdout and "task t3" in proc.stdout


def test_collect_with_nothing_to_judge_makes_no_commit(git_repo: Path) -> None:
    write_run(
        git_repo, "e", [{"id": "t1", "outputs": ["a.json"]}], {"executor": {"kind": "external"}}
    )
    assert _gitrun(git_repo, "start", "e").returncode == 0
    assert _gitrun(git_repo, "collect", "e").returncode == 0  # t1: missing, one attempt used
    tip = git(git_repo, "rev-parse", "gitrun/e")
    again = _gitrun(git_repo, "collect", "e")
    assert again.returncode == 0
    assert git(git_repo, "rev-parse", "gitrun/e") == tip


def test_a_failed_canary_halts_external_mode_until_retry(git_repo: Path) -> None:
    """The halt persists (exit 3 from every later collect/next/resume) and
    `gitrun retry` lifts it; the canary is the first open task, as in command mode."""
    tasks = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, 4)]
    limits = {"canary": 1, "max_attempts": 1, "concurrency": 2}
    write_run(git_repo, "e", tasks, {"executor": {"kind": "external"}, "limits": limits})
    started = _gitrun(git_repo, "start", "e", "--json", "--full")
    assert [b["task"] for b in json.loads(started.stdout)["leased"]] == ["t1"]
    collected = _gitrun(git_repo, "collect", "e")  # the canary wrote nothing
    assert collected.returncode == 3, collected.stdout + collected.stderr
    assert "halted: canary failed: t1" in collected.stdout
    for args in (["next", "e"], ["resume", "e"], ["collect", "e"]):
        again = _gitrun(git_repo, *args)
        assert again.returncode == 3, (args, again.stdout, again.stderr)
        assert "canary failed" in again.stdout + again.stderr
    status = _gitrun(git_repo, "status", "e")
    assert "halted: canary failed" in status.stdout and "gitrun retry e" in status.stdout
    retried = _gitrun(git_repo, "retry", "e")
    assert retried.returncode == 0 and "lifted the halt" in retried.stdout
    batch = _gitrun(git_repo, "next", "e", "--json", "--full")
    assert batch.returncode == 0, batch.stderr
    assert [b["task"] for b in json.loads(batch.stdout)["leased"]] == ["t1"]  # the canary, alone


def test_governor_state_outlives_a_call_and_damage_to_it_is_a_warning(git_repo: Path) -> None:
    from gitrun.store.local import LocalPaths

    tasks = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, 5)]
    packet = {
        "executor": {"kind": "external"},
        "limits": {"canary": 0, "concurrency": 4, "backoff_base": "60s", "backoff_cap": "60s"},
    }
    write_run(git_repo, "e", tasks, packet)
    assert _gitrun(git_repo, "start", "e").returncode == 0
    collected = _gitrun(git_repo, "collect", "e", "--throttled", "t1")
    assert collected.returncode == 0, collected.stderr
    state = LocalPaths.of(git_repo, "e").governor
    saved = json.loads(state.read_text())
    # Four leased at once, one throttled: just under the four the API refused,
    # in the one model bucket the run calls (its client and its model).
    bucket = saved["buckets"]["external/test-model"]
    assert saved["v"] == 1 and bucket["concurrency"] == 3 and bucket["ceiling"] == 4
    # The backoff's length is random (jitter): make it last, then it must be read back.
    bucket["backoff_until"] = time.time() + 3600
    state.write_text(json.dumps(saved))
    held = _gitrun(git_repo, "next", "e")  # the backoff, read back from disk, holds it
    assert "throttled: wait" in held.stdout + held.stderr, held.stdout
    state.write_text('{"v": 1, "concurrency": "two"')  # cut short
    proc = _gitrun(git_repo, "next", "e")
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 0, proc.stderr
    [warning] = proc.stderr.strip().splitlines()
    assert warning.startswith(f"gitrun: warning: {state} is not valid JSON"), warning
    assert "start afresh" in warning
    written = json.loads(state.read_text())["buckets"]["external/test-model"]
    assert written["concurrency"] == 3  # written anew, as the ledger's last change left it


def test_external_runs_get_the_stray_write_audit(git_repo: Path) -> None:
    tasks = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, 3)]
    write_run(git_repo, "e", tasks, {"executor": {"kind": "external"}, "limits": {"canary": 0}})
    git(git_repo, "add", ".gitrun")
    git(git_repo, "commit", "-qm", "define e")
    (git_repo / "draft.md").write_text("the user's work in progress\n")  # before the run
    assert _gitrun(git_repo, "start", "e").returncode == 0  # t1 and t2 leased
    # A subagent writes its output and a file no task owns.
    (git_repo / "out/t1.json").write_text('{"ok": true}')  # out/ exists: gitrun made it
    (git_repo / "stray.txt").write_text("not mine to write\n")
    proc = _gitrun(git_repo, "collect", "e", "--json", "--full")
    assert proc.returncode == 0, proc.stderr
    collected = json.loads(proc.stdout)
    assert collected["done"] == ["t1"]
    assert collected["violations"] == [
        "stray.txt changed outside every owned path (running: t1, t2)"
    ]
    status = json.loads(_gitrun(git_repo, "status", "e", "--json").stdout)
    assert [v["path"] for v in status["violations"]] == ["stray.txt"]
    # With nothing leased, a change is the orchestrator's own: not a violation.
    (git_repo / "notes.md").write_text("the lead's notes\n")
    nxt = _gitrun(git_repo, "next", "e")
    assert nxt.returncode == 0 and "violation" not in nxt.stderr, nxt.stderr
    again = json.loads(_gitrun(git_repo, "collect", "e", "--json", "--full").stdout)
    assert again["violations"] == []  # each change is reported once


def test_a_stray_write_halts_a_strict_external_run(git_repo: Path) -> None:
    write_run(
        git_repo,
        "e",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {"executor": {"kind": "external"}, "ownership": {"strict": True}},
    )
    assert _gitrun(git_repo, "start", "e").returncode == 0
    (git_repo / "elsewhere.txt").write_text("x")
    proc = _gitrun(git_repo, "collect", "e")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "ownership violation: elsewhere.txt" in proc.stdout
    later = _gitrun(git_repo, "next", "e")
    assert later.returncode == 3 and "halted: ownership violation" in later.stdout + later.stderr


# -- a healthy run that has nothing (more) to hand out now says why, exit 0 ------------------


def _invoke(repo: Path, *args: str) -> tuple[int, str]:
    """One command in this process (so the load average is the test's), its exit and stdout."""
    from typer.testing import CliRunner

    from gitrun.cli.main import app

    result = CliRunner().invoke(app, ["-C", str(repo), *args])
    return result.exit_code, result.stdout


def _external(repo: Path, tasks: int, **limits: object) -> None:
    table = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, tasks + 1)]
    write_run(repo, "e", table, {"executor": {"kind": "external"}, "limits": limits})


def test_a_busy_machine_is_a_wait_with_its_reason(git_repo: Path, monkeypatch: MonkeyPatch) -> None:
    from gitrun.engine import governor

    monkeypatch.setattr(governor, "read_load", lambda: 9.0)
    monkeypatch.delenv("GITRUN_MAX_LOAD")  # the suite's own, which no load reaches
    _external(git_repo, 3, canary=0, concurrency=4, max_load=4.0)
    code, out = _invoke(git_repo, "start", "e", "--json", "--full")
    batch = json.loads(out)
    assert code == 0 and [b["task"] for b in batch["leased"]] == ["t1"]  # one at a time
    assert batch["why"] == "load"
    assert batch["reason"].startswith(
        "leased 1 of 4 free: the machine is busy: the load average 9.0 is over max_load 4 "
        "([limits] max_load or GITRUN_MAX_LOAD changes it), so one attempt at a time"
    )
    code, out = _invoke(git_repo, "next", "e")  # the lead asks again at once
    assert code == 0, out
    assert "so one attempt at a time; 1 leased (t1): wait for them, then `gitrun collect e`" in out
    assert _invoke(git_repo, "collect", "e")[0] == 0  # t1 wrote nothing: released
    monkeypatch.setattr(governor, "read_load", lambda: 0.5)
    code, out = _invoke(git_repo, "next", "e", "--json", "--full")
    batch = json.loads(out)
    assert code == 0 and len(batch["leased"]) == 3 and batch["why"] is None and not batch["reason"]


def test_the_canary_and_a_throttle_are_waits(git_repo: Path, monkeypatch: MonkeyPatch) -> None:
    from gitrun.engine import governor

    monkeypatch.setattr(governor, "read_load", lambda: 0.0)
    _external(git_repo, 3, canary=1, concurrency=2)
    code, out = _invoke(git_repo, "start", "e", "--json", "--full")
    batch = json.loads(out)
    assert code == 0 and [b["task"] for b in batch["leased"]] == ["t1"]
    assert batch["why"] == "canary running"
    assert batch["reason"] == "leased 1 of 2 free: the canary (t1) runs alone first"
    code, out = _invoke(git_repo, "next", "e", "--json", "--full")
    batch = json.loads(out)
    assert code == 0 and batch["leased"] == [] and batch["wait_s"] is None
    assert batch["why"] == "canary running" and "wait for them, then `gitrun collect e`" in out
    # The backoff's jitter at its top, so that the wait is never a few milliseconds.
    monkeypatch.setattr(random.Random, "uniform", lambda _self, _low, high: high)
    code, _ = _invoke(git_repo, "collect", "e", "--throttled", "t1")
    assert code == 0
    code, out = _invoke(git_repo, "next", "e", "--json", "--full")
    batch = json.loads(out)
    assert code == 0 and batch["leased"] == [] and batch["why"] == "throttled", batch
    assert batch["wait_s"] >= 1 and f"wait {batch['wait_s']:.0f} s" in batch["reason"]


def test_nothing_left_but_a_task_failed_for_good_is_exit_1(
    git_repo: Path, monkeypatch: MonkeyPatch
) -> None:
    from gitrun.engine import governor

    monkeypatch.setattr(governor, "read_load", lambda: 0.0)
    _external(git_repo, 1, canary=0, max_attempts=1)
    assert _invoke(git_repo, "start", "e")[0] == 0
    assert _invoke(git_repo, "collect", "e")[0] == 0  # t1 wrote nothing: its one attempt
    code, out = _invoke(git_repo, "next", "e")
    assert code == 1 and "t1 used up their attempts" in out


def test_a_full_concurrency_is_a_wait_said_not_a_silent_exit_1(
    git_repo: Path, monkeypatch: MonkeyPatch
) -> None:
    from gitrun.engine import governor

    monkeypatch.setattr(governor, "read_load", lambda: 0.0)
    _external(git_repo, 3, canary=0, concurrency=2)
    code, out = _invoke(git_repo, "start", "e", "--json", "--full")
    assert code == 0 and len(json.loads(out)["leased"]) == 2
    code, out = _invoke(git_repo, "next", "e", "--json", "--full")
    batch = json.loads(out)
    assert code == 0 and batch["leased"] == [] and batch["why"] == "leased", batch
    assert "2 leased (t1, t2): wait for their subagents, then `gitrun collect e`" in batch["reason"]


def test_a_lead_reads_at_most_200_bytes_of_gitrun_per_task(git_repo: Path) -> None:
    """The compact form a lead reads: each task once (its pointer), what a
    batch shares once, no field that says nothing; over a whole 64-task run
    led batch by batch, at most 200 bytes of gitrun's output per task."""
    tasks = [{"id": f"t{i:04d}", "outputs": [f"out/t{i:04d}.json"]} for i in range(64)]
    packet = {"executor": {"kind": "external"}, "limits": {"concurrency": 16, "max_load": 1e6}}
    write_run(git_repo, "e", tasks, packet)
    git(git_repo, "add", ".gitrun")
    git(git_repo, "commit", "-qm", "define e")
    printed = 0

    def lead(*args: str) -> dict[str, object]:
        nonlocal printed
        proc = _gitrun(git_repo, *args)
        assert proc.returncode == 0, proc.stderr
        printed += len(proc.stdout.encode()) + len(proc.stderr.encode())
        assert proc.stdout.count("\n") == 1  # one line
        return json.loads(proc.stdout)  # type: ignore[no-any-return]

    batch = lead("start", "e", "--json")
    assert batch["why"] == "canary running"  # and nothing that says nothing:
    assert set(batch) == {"leased", "agent", "model", "usage", "why", "reason"}
    assert list(batch["leased"]) == ["t0000"]  # the canary: task -> its pointer
    assert batch["agent"] == "gitrun:gitrun-worker"  # the plugin's: no agent file here
    assert batch["usage"] == ".git/gitrun/e/logs/{task}.{attempt}.usage.json"
    for _ in range(20):
        if batch.get("done"):
            break
        for task in batch.get("leased", {}):  # type: ignore[union-attr]
            (git_repo / f"out/{task}.json").write_text('{"ok": true}')
        collected = lead("collect", "e", "--json")
        assert "missing" not in collected  # (an empty list is left out)
        batch = lead("next", "e", "--json")
    assert batch.get("done"), batch
    assert printed / len(tasks) <= 200, printed / len(tasks)


def test_next_never_hands_a_claude_lead_more_than_its_client_starts(git_repo: Path) -> None:
    """Claude Code refuses Agent calls past CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS
    running subagents (20 by default) and tells the model not to retry: a lead's
    `next` (its Bash tool runs gitrun with CLAUDECODE=1) hands out no more."""
    packet = {"executor": {"kind": "external"}, "limits": {"canary": 0, "concurrency": 30}}
    for run in ("e", "f"):
        tasks = [{"id": f"t{i:02d}", "outputs": [f"{run}/t{i:02d}.json"]} for i in range(40)]
        write_run(git_repo, run, tasks, packet)
    git(git_repo, "add", ".gitrun")
    git(git_repo, "commit", "-qm", "define e and f")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITRUN_", "CLAUDE"))}
    env["GITRUN_MAX_LOAD"] = "1000000"

    def start(run: str, **extra: str) -> dict[str, object]:
        proc = run_gitrun_call(["start", run, "--json"], git_repo, env={**env, **extra})
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)  # type: ignore[no-any-return]

    batch = start("e", CLAUDECODE="1")
    assert len(batch["leased"]) == 20 and batch["why"] == "client", batch  # type: ignore[arg-type]
    assert "leased 20 of 30 free" in str(batch["reason"])
    assert "CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS" in str(batch["reason"])
    batch = start("f", CLAUDECODE="1", CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS="25")
    assert len(batch["leased"]) == 25  # type: ignore[arg-type]
