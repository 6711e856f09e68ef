"""A cut-off attempt continued, with the real pinned clients against the mock model.

Each worker does six tool turns (five commands, then the write of its
output) and closes with a line. Its conversation is cut off at its fourth
turn: a 429 its client gives up on, a command that outlives the attempt's
timeout, or a driver killed with SIGKILL (then ``gitrun resume``). The try
after it must continue the conversation (its first request carries the
turns done) with the continuation prompt, and the ledger must say so; it
starts fresh when the conversation is gone, and after a resumed try that
failed. Skipped, with the reason, without the clients (``.ci/install-clients``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import commit_all, ledger_records, write_run
from tests.realclient.claude import INSTALLED, claude_binary, claude_env
from tests.realclient.clis import gitrun
from tests.realclient.mockmodel import Failure, MockModel, Request, Turn, bash, say, write

pytestmark = pytest.mark.realclient

OUTPUT = "out/t1.json"
CUT_AT = 3  # the fourth turn
THROTTLE = Failure(headers=(("retry-after", "120"),))  # over a minute: claude gives up at once
HANG = bash("python3 -c 'import time; time.sleep(100)'", "Wait")  # outlives the attempt


class Worker:
    """The model's side of one task: turn ``n`` of the conversation is the
    script's ``n``-th (counted from the turns the request carries), but the
    first ``cuts`` times the fourth is reached it is ``cut``."""

    def __init__(self, repo: Path, cut: Turn | Failure, cuts: int = 1) -> None:
        steps: list[Turn] = [bash(f"echo step {n}", f"Step {n}") for n in range(1, 6)]
        self.script = [*steps, write(str(repo / OUTPUT), '{"done": true}')]
        self.cut, self.cuts = cut, cuts
        self.asked: list[int] = []  # the turns each agent-loop request carried
        self.lock = threading.Lock()
        self.hung = threading.Event()

    def __call__(self, request: Request) -> Turn | Failure:
        messages = request.body.get("messages") or []
        steps = sum(1 for m in messages if m.get("role") == "assistant")
        self.asked.append(steps)
        if steps == CUT_AT and self.cuts > 0:
            self.cuts -= 1
            if self.cut is HANG:
                self.hung.set()
            return self.cut
        return self.script[steps] if steps < len(self.script) else say("done")


def _run(repo: Path, timeout: str = "60s", **executor: object) -> None:
    packet = {
        "executor": {"preset": "claude", **executor},
        "model": {"default": "claude-mock-1"},
        "limits": {
            "canary": 0,
            "concurrency": 1,
            "max_attempts": 3,
            "timeout": timeout,
            "backoff_base": "1s",
            "backoff_cap": "1s",
            "max_load": 1e6,
            "max_spawns": 10,
        },
    }
    write_run(repo, "c", [{"id": "t1", "outputs": [OUTPUT]}], packet)
    commit_all(repo, "run c")


def _env(repo: Path, url: str) -> dict[str, str]:
    env = claude_env(repo.parent / "home", url)
    env["PATH"] = os.pathsep.join([str(INSTALLED.parent), env["PATH"]])
    return env


def _tries(repo: Path) -> list[dict[str, Any]]:
    return [r for r in ledger_records(repo, "c") if "outcome" in r and "event" not in r]


def _committed_once(repo: Path) -> None:
    shown = subprocess.run(
        ["git", "show", f"gitrun/c:{OUTPUT}"], cwd=repo, capture_output=True, text=True, check=True
    )
    assert json.loads(shown.stdout) == {"done": True}
    log = subprocess.run(
        ["git", "log", "--format=%(trailers:key=Gitrun-Task,valueonly)", "gitrun/c"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    assert log.stdout.split().count("t1") == 1


@pytest.fixture
def repo(git_repo: Path) -> Path:
    claude_binary()
    (git_repo.parent / "home").mkdir()
    return git_repo


def test_claude_continues_a_conversation_a_throttle_cut_off(repo: Path) -> None:
    _run(repo)
    worker = Worker(repo, THROTTLE)
    with MockModel(worker, max_requests=40) as model:
        done = gitrun(repo, _env(repo, model.url), "start", "c")
        continued = [r for r in model.requests if r.is_agent_turn][CUT_AT + 1]
    assert done.returncode == 0, done.stdout + done.stderr
    first, second = _tries(repo)
    assert (first["attempt"], first["outcome"]) == (1, "throttled")
    assert (second["attempt"], second["outcome"]) == (1, "valid")
    assert second["resumed_from"] == {"attempt": 1, "throttles": 0}
    assert first["conversation"] == second["conversation"]
    # The try after the cut carried the three turns done, and was told to go on.
    assert worker.asked == [0, 1, 2, 3, 3, 4, 5, 6]
    said = json.dumps(continued.body["messages"][-1])
    assert "was cut off" in said and "gitrun run c, task t1" in said
    assert "continuing the conversation of attempt 1" in done.stderr
    _committed_once(repo)
    _shows_the_resume(repo, _env(repo, model.url), first, second)


def _shows_the_resume(
    repo: Path, env: dict[str, str], first: dict[str, Any], second: dict[str, Any]
) -> None:
    """status (text and --json) and the report say which try continued which,
    and the turns it did not redo; tokens as the client reported them, or
    "not measured"."""
    assert second["resumed_turns"] == CUT_AT
    said = "t1: try 2 (attempt 1) continued the conversation of attempt 1 (throttled)"
    line = f"{said}; 3 turns not redone"
    reported = "usage" in first  # what the client said its cut-off try spent
    status = gitrun(repo, env, "status", "c")
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"    {line}\n" in status.stdout
    assert "  resumed 1 try in a cut-off conversation: 3 turns not redone; " in status.stdout
    as_json = gitrun(repo, env, "status", "c", "--json")
    resumed = json.loads(as_json.stdout)["resumed"]
    assert resumed["continued"] == [
        {
            "task": "t1",
            "try": 2,
            "attempt": 1,
            "of_try": 1,
            "of_attempt": 1,
            "cut": "throttled",
            "turns": 3,
        }
    ]
    assert resumed["turns_not_redone"] == 3 and resumed["fresh"] == []
    if not reported:
        assert resumed["cut_off_tokens"] is None and resumed["cut_off_unreported"] == 1
        assert "tokens of the cut-off tries not measured" in status.stdout
    else:
        assert resumed["cut_off_tokens"] > 0 and resumed["cut_off_unreported"] == 0
        assert f"the cut-off tries had spent {resumed['cut_off_tokens']:,} tokens" in status.stdout
    page = repo.parent / "report.html"
    report = gitrun(repo, env, "report", "c", "-o", str(page))
    assert report.returncode == 0, report.stdout + report.stderr
    html = page.read_text()
    assert f"<li>{line}</li>" in html
    assert '<div class="num" data-key="turns_not_redone"' in html and "<b>3</b>" in html


def test_claude_continues_a_conversation_its_timeout_cut_off(repo: Path) -> None:
    _run(repo, timeout="12s")
    worker = Worker(repo, HANG)
    with MockModel(worker, max_requests=40, lifetime=180) as model:
        done = gitrun(repo, _env(repo, model.url), "start", "c")
    assert done.returncode == 0, done.stdout + done.stderr
    first, second = _tries(repo)
    assert (first["outcome"], first["timed_out"]) == ("missing", True)
    assert (second["attempt"], second["outcome"]) == (2, "valid")
    assert second["resumed_from"] == {"attempt": 1, "throttles": 0}
    # Nothing redone: the resumed conversation holds the four turns (claude
    # closes the interrupted command's with a note of its own).
    assert worker.asked[:4] == [0, 1, 2, 3] and worker.asked[4] > CUT_AT
    _committed_once(repo)


def _kill_driver_at_the_cut(repo: Path, worker: Worker, env: dict[str, str]) -> None:
    driver = subprocess.Popen(
        [sys.executable, "-m", "gitrun", "start", "c"],
        cwd=repo,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert worker.hung.wait(90), "the worker never reached its fourth turn"
        time.sleep(2.0)  # its command runs: the conversation holds the turn
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)


def test_claude_continues_the_conversation_of_a_driver_killed_with_sigkill(repo: Path) -> None:
    _run(repo)
    worker = Worker(repo, HANG)
    with MockModel(worker, max_requests=40, lifetime=180) as model:
        env = _env(repo, model.url)
        _kill_driver_at_the_cut(repo, worker, env)
        done = gitrun(repo, env, "resume", "c")
    assert done.returncode == 0, done.stdout + done.stderr
    first, second = _tries(repo)
    assert (first["attempt"], first["outcome"]) == (1, "abandoned")
    assert second["outcome"] == "valid" and second["resumed_from"] == {
        "attempt": 1,
        "throttles": 0,
    }
    assert worker.asked[4] > CUT_AT
    _committed_once(repo)


def test_claude_starts_fresh_when_the_conversation_is_gone(repo: Path) -> None:
    """A resume on another machine: the client's home holds no conversation."""
    _run(repo)
    worker = Worker(repo, HANG)
    with MockModel(worker, max_requests=40, lifetime=180) as model:
        env = _env(repo, model.url)
        _kill_driver_at_the_cut(repo, worker, env)
        shutil.rmtree(repo.parent / "home" / ".claude" / "projects")
        done = gitrun(repo, env, "resume", "c")
    assert done.returncode == 0, done.stdout + done.stderr
    first, second = _tries(repo)
    assert first["outcome"] == "abandoned" and "resumed_from" not in second
    assert second["fresh_because"] == f"its conversation {first['conversation']} is gone"
    assert worker.asked[4] == 0  # from its first turn
    _committed_once(repo)
    why = f"t1: try 2 (attempt 2) started fresh: its conversation {first['conversation']} is gone"
    status = gitrun(repo, env, "status", "c")
    assert f"  resumed no try; 1 try after a cut-off started fresh\n    {why}\n" in status.stdout


def test_claude_starts_fresh_after_a_resumed_try_that_failed(repo: Path) -> None:
    _run(repo)
    worker = Worker(repo, THROTTLE, cuts=2)  # the resumed try is refused too
    with MockModel(worker, max_requests=40) as model:
        done = gitrun(repo, _env(repo, model.url), "start", "c")
    assert done.returncode == 0, done.stdout + done.stderr
    first, resumed, fresh = _tries(repo)
    assert first["outcome"] == resumed["outcome"] == "throttled"
    assert resumed["resumed_from"] == {"attempt": 1, "throttles": 0}
    assert fresh["outcome"] == "valid" and "resumed_from" not in fresh
    assert fresh["fresh_because"] == "the try before was a resumed one, and it failed"
    assert worker.asked == [0, 1, 2, 3, 3, 0, 1, 2, 3, 4, 5, 6]
    _committed_once(repo)


def test_resume_false_starts_every_try_fresh(repo: Path) -> None:
    _run(repo, resume=False)
    worker = Worker(repo, THROTTLE)
    with MockModel(worker, max_requests=40) as model:
        done = gitrun(repo, _env(repo, model.url), "start", "c")
    assert done.returncode == 0, done.stdout + done.stderr
    first, second = _tries(repo)
    assert "conversation" not in first and "resumed_from" not in second
    assert worker.asked == [0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6]
    _committed_once(repo)


# -- codex: `codex exec resume SESSION_ID PROMPT`, its id read from `thread.started` -------


class CodexWorker:
    """The same worker for codex: its turn is counted from the function calls
    the request's conversation holds."""

    def __init__(self, cut: str) -> None:
        from tests.realclient.openai_mock import shell

        steps = [shell(f"echo step {n}") for n in range(1, 6)]
        self.script = [
            *steps,
            shell(f"mkdir -p out && printf '%s' '{{\"done\": true}}' > {OUTPUT}"),
        ]
        self.cut = cut  # "throttle", "hang" (a command that outlives it) or "stall" (no answer)
        self.cuts = 1
        self.asked: list[int] = []
        self.hung = threading.Event()

    def turn(self, request: Any) -> Any:
        from tests.realclient.openai_mock import shell
        from tests.realclient.scripted import Refuse, Reply

        items = request.body.get("input") or []
        steps = sum(1 for i in items if isinstance(i, dict) and i.get("type") == "function_call")
        self.asked.append(steps)
        if steps == CUT_AT and self.cuts > 0:
            self.cuts -= 1
            if self.cut == "hang":
                self.hung.set()
                return shell("python3 -c 'import time; time.sleep(100)'")
            if self.cut == "stall":  # codex's command tool yields while a command runs on
                time.sleep(30)  # past the attempt's timeout, on this request's own thread
            return Refuse(429, {"error": {"type": "rate_limit_exceeded", "message": "Rate limit"}})
        return self.script[steps] if steps < len(self.script) else Reply("done")


def _codex(tmp_path: Path, worker: CodexWorker) -> Any:
    from tests.realclient.openai_mock import OpenAIMock

    class Conversing(OpenAIMock):
        def answer(self, request: Any) -> Any:
            self.request = request
            return super().answer(request)

        def next_turn(self) -> Any:
            turn = worker.turn(self.request)
            from tests.realclient.scripted import Call

            if isinstance(turn, Call):
                turn = Call(turn.name, turn.args, self.new_id("call_mock"), turn.namespace)
            return turn

    return Conversing([], max_requests=60, lifetime=180)


@pytest.mark.parametrize("cut", ["throttle", "timeout", "sigkill"])
def test_codex_continues_a_cut_off_conversation(git_repo: Path, tmp_path: Path, cut: str) -> None:
    from tests.realclient.clis import client_binary, codex_env

    client_binary("codex")
    packet = {
        "executor": {"preset": "codex"},
        "model": {"default": "gpt-mock"},
        "limits": {
            "canary": 0,
            "max_attempts": 3,
            "max_spawns": 10,
            "timeout": "20s" if cut == "timeout" else "90s",
            "backoff_base": "1s",
            "backoff_cap": "1s",
            "max_load": 1e6,
        },
    }
    write_run(git_repo, "c", [{"id": "t1", "outputs": [OUTPUT]}], packet)
    commit_all(git_repo, "run c")
    worker = CodexWorker({"throttle": "throttle", "timeout": "stall", "sigkill": "hang"}[cut])
    with _codex(tmp_path, worker) as api:
        retries = "request_max_retries = 0\nstream_max_retries = 0\n"
        env = codex_env(tmp_path, api.url + "/v1", retries)
        if cut == "sigkill":
            driver = subprocess.Popen(
                [sys.executable, "-m", "gitrun", "start", "c"],
                cwd=git_repo,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                assert worker.hung.wait(90), "the worker never reached its fourth turn"
                time.sleep(2.0)
            finally:
                driver.send_signal(signal.SIGKILL)
                driver.wait(timeout=30)
            done = gitrun(git_repo, env, "resume", "c")
        else:
            done = gitrun(git_repo, env, "start", "c")
    assert done.returncode == 0, done.stdout + done.stderr
    first, second = _tries(git_repo)
    expected = {"throttle": "throttled", "timeout": "missing", "sigkill": "abandoned"}[cut]
    assert first["outcome"] == expected and first["conversation"]
    assert second["outcome"] == "valid"
    assert second["resumed_from"] == {"attempt": 1, "throttles": 0}
    assert worker.asked[: CUT_AT + 1] == [0, 1, 2, 3] and worker.asked[CUT_AT + 1] >= CUT_AT
    _committed_once(git_repo)
