"""The gemini preset driven by `gitrun start` over the real gemini CLI.

gemini-cli 0.61 talks to ``tests/realclient/gemini_mock.py`` on 127.0.0.1
through ``GOOGLE_GEMINI_BASE_URL``, with the ``gemini-api-key`` auth type in
a private HOME and a dummy key: no network. Every test runs in a fresh
repository gemini has never been told to trust. Skipped, with the reason,
when gemini is not installed (``.ci/install-clients``).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from gitrun.engine import governor
from tests.helpers import commit_all, git, ledger_records, write_run
from tests.realclient.clis import client_binary, gitrun, offline_env, private_bin
from tests.realclient.gemini_mock import GeminiMock, run_shell, write_file
from tests.realclient.scripted import Answer, Refuse, Reply, Request, Turn

pytestmark = pytest.mark.realclient

OUTPUT = "out/t1.json"
# The preset's argv before it was fixed for the real client: --yolo, and no --skip-trust.
OLD_PRESET = ["gemini", "--model", "{model}", "--yolo", "--prompt", "{pointer}"]


def _gemini_env(tmp_path: Path, base_url: str, *, auth: bool = True) -> dict[str, str]:
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    if auth:
        settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
        (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    extra = {"GOOGLE_GEMINI_BASE_URL": base_url}
    if auth:
        extra["GEMINI_API_KEY"] = "mock-not-a-key"
    return offline_env(home, private_bin(tmp_path, "gemini"), **extra)


def _run(repo: Path, command: list[str] | None = None) -> None:
    executor: dict[str, object] = {"kind": "command", "preset": "gemini"}
    if command is not None:
        executor["command"] = command
    write_run(
        repo,
        "r",
        [{"id": "t1", "outputs": [OUTPUT]}, {"id": "t2", "outputs": ["out/t2.json"]}],
        {
            "model": {"default": "gemini-mock"},
            "executor": executor,
            "limits": {"canary": 1, "max_attempts": 3, "timeout": "90s"},
        },
    )
    commit_all(repo, "run r")


def test_the_owned_write_lands_in_an_untrusted_folder_and_is_committed(
    git_repo: Path, tmp_path: Path
) -> None:
    client_binary("gemini")
    _run(git_repo)
    script = [
        write_file(OUTPUT, '{"task": "t1"}'),
        Reply("Wrote it."),
        write_file("out/t2.json", '{"task": "t2"}'),
        Reply("Wrote it."),
    ]
    with GeminiMock(script) as api:
        done = gitrun(git_repo, _gemini_env(tmp_path, api.url), "start", "r")
        responses = api.function_responses()
        first = api.requests[0]
        requests = api.requests
    assert done.returncode == 0, done.stdout + done.stderr
    for task in ("t1", "t2"):
        assert json.loads(git(git_repo, "show", f"gitrun/r:out/{task}.json")) == {"task": task}
    assert [r["name"] for r in responses] == ["write_file", "write_file"]
    assert "Successfully created and wrote" in json.dumps(responses[0]["response"])
    assert first.path.startswith("/v1beta/models/gemini-mock:streamGenerateContent")
    assert "gitrun run r, task t1" in json.dumps(first.body["contents"])
    # Each attempt's tokens, from gemini's closing JSON object, are
    # what the mock served it (100 prompt and 20 candidate tokens an answer);
    # gemini states no cost: unknown, not zero.
    from gitrun.store.ledger import attempt_records
    from gitrun.store.usage import usage_of

    records = attempt_records(ledger_records(git_repo))
    reported = [usage_of(r) for r in records]
    assert all(u is not None and u.model == "gemini-mock" for u in reported), records
    assert sum(u.input for u in reported if u) == 100 * len(requests)
    assert sum(u.output for u in reported if u) == 20 * len(requests)
    assert all(u.cost_usd is None for u in reported if u)


def test_the_old_flags_exit_55_which_halts_the_run_at_once(git_repo: Path, tmp_path: Path) -> None:
    """Without --skip-trust gemini refuses the fresh folder (exit 55, no request
    made); that is the same for every task, so one attempt halts the run."""
    client_binary("gemini")
    _run(git_repo, OLD_PRESET)
    with GeminiMock([write_file(OUTPUT, "{}"), Reply("done")]) as api:
        done = gitrun(git_repo, _gemini_env(tmp_path, api.url), "start", "r")
        asked = len(api.requests)
    assert done.returncode == 3, done.stdout + done.stderr
    assert asked == 0
    assert (
        "environment fault: t1 attempt 1: gemini exited 55, because the folder is not trusted; "
        "pass --skip-trust" in done.stdout
    )
    assert [r["attempt"] for r in ledger_records(git_repo) if "outcome" in r] == [1]
    assert not (git_repo / OUTPUT).exists()


def test_an_authentication_error_halts_after_one_attempt(git_repo: Path, tmp_path: Path) -> None:
    client_binary("gemini")
    _run(git_repo)
    with GeminiMock([write_file(OUTPUT, "{}"), Reply("done")]) as api:
        done = gitrun(git_repo, _gemini_env(tmp_path, api.url, auth=False), "start", "r")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "environment fault: t1 attempt 1: gemini exited 41, an authentication error" in (
        done.stdout
    )
    records = [r for r in ledger_records(git_repo) if "outcome" in r]
    assert [(r["task"], r["exit"]) for r in records] == [("t1", 41)]
    halts = [r for r in ledger_records(git_repo) if r.get("event") == "halt"]
    assert [h["kind"] for h in halts] == [governor.ENVIRONMENT]


def test_a_careless_gemini_worker_confined_changes_nothing_of_anyone_else(
    git_repo: Path, tmp_path: Path
) -> None:
    """Under bubblewrap, gemini's shell tool writes outside its task's paths
    fail or stay in its staging directory; so does its write_file tool."""
    from tests.realclient.careless import (
        CARELESS,
        assert_nothing_of_anyone_else_changed,
        careless_run,
        needs_bubblewrap,
    )
    from tests.realclient.gemini_mock import run_shell

    client_binary("gemini")
    needs_bubblewrap()
    config = careless_run(git_repo, "gemini", "gemini-mock")
    script = [
        run_shell(CARELESS),
        write_file("SECRET.txt", "overwritten"),
        Reply("Done."),
        run_shell(CARELESS),
        Reply("Done."),
    ]
    with GeminiMock(script) as api:
        done = gitrun(git_repo, _gemini_env(tmp_path, api.url), "start", "r")
        responses = api.function_responses()
    said = done.stdout + done.stderr + json.dumps(responses)
    assert done.returncode == 0, said
    assert_nothing_of_anyone_else_changed(git_repo, config, said)
    # What gemini's tools were told: the protected file and the git config
    # refused at once, by the shell and by write_file alike, and so is the
    # neighbour's output in its own folder: nothing of t2's to set aside after.
    told = json.dumps(responses[:2])
    assert "secret: refused" in told and "config: refused" in told, told
    assert "t2: refused" in told, told
    assert "read-only file system" in json.dumps(responses[1]).lower(), responses[1]
    assert "wrote out/t2.json" not in done.stderr


class _CutAtThird(GeminiMock):
    """Two shell turns, then 429s until the attempt is cut off (gemini retries
    a 429 for minutes, so its timeout ends the attempt); a request that
    carries the continuation prompt is answered with the write and a line."""

    def __init__(self) -> None:
        super().__init__([], max_requests=200)
        self.asked: list[int] = []  # the calls each agent request carried
        self.serving = threading.local()  # the request this handler thread answers

    def answer(self, request: Request) -> Answer:
        self.serving.request = request
        return super().answer(request)

    def next_turn(self) -> Turn:
        request = self.serving.request
        contents = json.dumps(request.body.get("contents") or [])
        done = contents.count('"functionCall"')  # the calls it made (each answered)
        self.asked.append(done)
        if done < 2:
            return run_shell(f"echo step {done + 1}")
        if "was cut off" not in contents:
            error = {"code": 429, "message": "Resource exhausted.", "status": "RESOURCE_EXHAUSTED"}
            return Refuse(429, {"error": error})
        return write_file(OUTPUT, '{"task": "t1"}') if done == 2 else Reply("Wrote it.")


def test_gemini_continues_the_session_its_timeout_cut_off_in_its_retries(
    git_repo: Path, tmp_path: Path
) -> None:
    client_binary("gemini")
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": [OUTPUT]}],
        {
            "model": {"default": "gemini-mock"},
            "executor": {"kind": "command", "preset": "gemini"},
            "limits": {"canary": 0, "max_attempts": 3, "timeout": "25s", "max_load": 1e6},
        },
    )
    commit_all(git_repo, "run r")
    with _CutAtThird() as api:
        done = gitrun(git_repo, _gemini_env(tmp_path, api.url), "start", "r")
        asked = api.asked
    assert done.returncode == 0, done.stdout + done.stderr
    first, second = [r for r in ledger_records(git_repo) if "outcome" in r and "event" not in r]
    assert first["timed_out"] and first["conversation"], first
    assert second["outcome"] == "valid" and second["conversation"] == first["conversation"]
    assert second["resumed_from"] == {"attempt": 1, "throttles": 0}
    assert second["resumed_turns"] == 2
    # The resumed session's first request carried the two calls done: none redone.
    assert asked[:2] == [0, 1] and asked[-2:] == [2, 3] and 0 not in asked[2:], asked
    assert json.loads(git(git_repo, "show", f"gitrun/r:{OUTPUT}")) == {"task": "t1"}
