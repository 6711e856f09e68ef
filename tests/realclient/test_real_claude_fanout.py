"""A 60-task external run led by real ``claude -p`` sessions that have only
the gitrun plugin: no ``hooks install``, no agent file, no ``--allowedTools``.

The lead is ``/gitrun:lead r``; the mock model plays it by reading what
gitrun printed (``tests/realclient/lead.py``), the way the skill tells a
model to, and plays each worker from its task's script. Some workers meet
a 429, one tries to write its neighbour's output, one with the shell.
The first lead is killed with SIGKILL, its subagents with it, in the middle
of a batch; a fresh session resumes and lands the run. Every output must be
validated and committed once, no stray write may land, and gitrun's own
output in the leads' context is measured. Skipped, with the reason, without
the CLI (``.ci/install-clients``) or Claude Code's sandbox.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import commit_all, git, write_run
from tests.realclient.claude import (
    claude_binary,
    claude_env,
    gitrun_beside_claude,
    sandbox_or_skip,
)
from tests.realclient.lead import Lead
from tests.realclient.mockmodel import (
    Failure,
    MockModel,
    Request,
    Turn,
    bash,
    say,
    write,
)

pytestmark = pytest.mark.realclient

TASKS = [f"t{i:02d}" for i in range(60)]
THROTTLED = {"t04", "t13", "t41"}  # their first request meets a 429
STRAY_WRITE = "t22"  # writes t23's output first
STRAY_SHELL = "t31"  # writes with the shell first
KILL_AFTER = 14  # workers finished when the first lead is killed
DEADLINE = 240.0
# gitrun's own output in the leads' context, per task: the pointer (about
# 160 bytes here) and a share of each batch's and each collect's few fields.
# bench/external.py holds 200 over 1,000 tasks at -j16; batches of 8, a
# canary, three throttles and a second lead's resume cost a few bytes more.
PER_TASK_BYTES = 220


@dataclass
class Workers:
    """Every worker's script: write its own output with the Write tool, then
    one short line. A throttled task's first request meets a 429."""

    repo: Path
    finished: int = 0
    kill: threading.Event = field(default_factory=threading.Event)
    throttled: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def brain(self, task: str) -> Any:
        def turn(request: Request) -> Turn | Failure:
            steps = sum(
                1 for m in request.body.get("messages") or [] if m.get("role") == "assistant"
            )
            with self.lock:
                if task in THROTTLED and task not in self.throttled:
                    self.throttled.add(task)
                    return Failure(429, headers=(("x-should-retry", "false"),))
            script = [write(str(self.repo / f"out/{task}.json"), json.dumps({"task": task}))]
            if task == STRAY_WRITE:
                script.insert(0, write(str(self.repo / "out/t23.json"), '{"task": "not t23"}'))
            if task == STRAY_SHELL:
                script.insert(0, bash(f"echo stray > out/{task}.json", "Write it"))
            if steps < len(script):
                return script[steps]
            with self.lock:
                self.finished += 1
                if self.finished >= KILL_AFTER:
                    self.kill.set()
            return say(f"wrote out/{task}.json")

        return turn


def _start_lead(repo: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            claude_binary(),
            "-p",
            "/gitrun:lead r",
            "--permission-mode",
            "acceptEdits",
            "--output-format",
            "json",
        ],
        cwd=repo,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: the kill takes its subagents too
    )


def test_sixty_tasks_led_with_only_the_plugin_through_throttles_and_a_killed_lead(
    git_repo: Path, tmp_path: Path
) -> None:
    claude_binary()
    sandbox_or_skip()
    packet = {
        "executor": {"kind": "external"},
        "limits": {
            "concurrency": 8,
            "max_load": 1e6,  # never held back by the load of a busy machine
            "backoff_base": "1s",
            "backoff_cap": "2s",
        },
    }
    write_run(git_repo, "r", [{"id": t, "outputs": [f"out/{t}.json"]} for t in TASKS], packet)
    commit_all(git_repo, "run r")
    home = tmp_path / "home"
    home.mkdir()
    installed = gitrun_beside_claude(
        git_repo, "plugin", "install", "--scope", "project", "--sandbox", HOME=str(home)
    )
    assert installed.returncode == 0, installed.stderr
    commit_all(git_repo, "the gitrun plugin")
    assert not (git_repo / ".claude/agents").exists()
    workers = Workers(git_repo)
    first, second = Lead("r", "gitrun start r --json"), Lead("r", "gitrun resume r --json")
    leads = iter([first, second])
    current: list[Lead] = [next(leads)]

    def lead(request: Request) -> Turn | Failure:
        return current[0](request)

    scripts = {f"task {t}:": workers.brain(t) for t in TASKS}
    with MockModel(lead, agents=scripts, max_requests=3000, lifetime=2 * DEADLINE) as model:
        env = claude_env(home, model.url)
        proc = _start_lead(git_repo, env)
        try:
            deadline = time.monotonic() + DEADLINE
            while not workers.kill.wait(0.2) and proc.poll() is None:
                assert time.monotonic() < deadline, ("the first lead got stuck", first.commands)
            assert proc.poll() is None, ("the first lead ended", proc.communicate(), first.commands)
            os.killpg(proc.pid, signal.SIGKILL)  # our own child's group, started above
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=60)
        assert first.batches >= 2, first.commands
        current[0] = next(leads)
        proc = _start_lead(git_repo, env)
        try:
            out, err = proc.communicate(timeout=DEADLINE)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate(timeout=60)
        assert proc.returncode == 0, (out[-2000:], err[-2000:], second.commands[-5:])
        assert second.commands[-1].startswith("gitrun land r"), second.commands
        # The stray writes, refused where they were made.
        denied = [
            model.tool_result(i)
            for i in model.tool_use_ids_of(f"task {STRAY_WRITE}:")
            if model.tool_result(i)[0]
        ]
        assert any("may write only out/t22.json" in text for _, text in denied), denied
        shell = model.tool_result(model.tool_use_ids_of(f"task {STRAY_SHELL}:")[0])
        assert shell[0] and "Read-only file system" in shell[1], shell
        results = model.tool_results()
        gitrun_results = [
            (call.input["command"], model.tool_result(call.id)[1])
            for call in model.tool_uses()
            if call.name == "Bash" and call.input["command"].startswith("gitrun")
            if call.id in results  # not the one the kill cut short
        ]
    assert workers.throttled == THROTTLED
    # Every output validated, landed and committed once, by its own task.
    for task in TASKS:
        assert json.loads((git_repo / f"out/{task}.json").read_text()) == {"task": task}
    added = git(git_repo, "log", "gitrun/r", "--format=", "--name-only", "--", "out/").split()
    assert sorted(added) == sorted(f"out/{t}.json" for t in TASKS), added
    status = json.loads(gitrun_beside_claude(git_repo, "status", "r", "--json").stdout)
    # The one hostile write, denied by the hook, is all status names.
    named = {(v.get("event"), v.get("task"), v.get("path")) for v in status["violations"]}
    assert status["counts"]["done"] == 60 and named <= {("denied", STRAY_WRITE, "out/t23.json")}
    # Neither the throttles nor the killed lead's leases used up an attempt.
    tasks = status["tasks"]
    assert all(tasks[t]["attempts"] == 0 for t in TASKS), tasks
    outcomes = Counter(r["outcome"] for t in TASKS for r in tasks[t]["records"])
    assert set(outcomes) <= {"valid", "throttled", "abandoned"}, outcomes
    assert outcomes["valid"] == 60 and outcomes["abandoned"] >= 1, outcomes
    assert outcomes["throttled"] >= 1, outcomes  # a 429 in the killed batch is abandoned
    # What gitrun printed into the leads' context: every result of a gitrun command.
    printed = sum(len(text.encode()) for _command, text in gitrun_results)
    print(f"gitrun printed {printed} B into the leads' context: {printed / 60:.0f} B per task")
    assert printed <= PER_TASK_BYTES * len(TASKS), printed
