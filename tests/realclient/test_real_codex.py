"""The codex preset driven by `gitrun start` over the real codex CLI.

codex 0.171 talks to ``tests/realclient/openai_mock.py`` (the Responses API
on 127.0.0.1) through a custom model provider in a private ``CODEX_HOME``:
no network, no API key. Skipped, with the reason, when codex is not
installed (``.ci/install-clients``).
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from gitrun.engine import governor
from tests.helpers import commit_all, git, ledger_records, write_run
from tests.realclient.clis import client_binary, codex_env, gitrun
from tests.realclient.openai_mock import OpenAIMock, shell
from tests.realclient.scripted import Reply

pytestmark = pytest.mark.realclient

OUTPUT = "out/t1.json"


def _run(repo: Path, **limits: object) -> None:
    write_run(
        repo,
        "r",
        [{"id": "t1", "outputs": [OUTPUT]}],
        {
            "model": {"default": "gpt-mock"},
            "executor": {"kind": "command", "preset": "codex"},
            "limits": {"canary": 1, "max_attempts": 2, "timeout": "90s", **limits},
        },
    )
    commit_all(repo, "run r")


def test_the_owned_write_lands_and_is_committed(git_repo: Path, tmp_path: Path) -> None:
    client_binary("codex")
    _run(git_repo)
    write = shell(f"mkdir -p out && printf '%s' '{{\"done\": true}}' > {OUTPUT}")
    with OpenAIMock([write, Reply("Wrote out/t1.json.")]) as api:
        env = codex_env(tmp_path, api.url + "/v1")
        done = gitrun(git_repo, env, "start", "r")
        requests = api.requests
        outputs = api.function_outputs()
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((git_repo / OUTPUT).read_text()) == {"done": True}
    committed = git(git_repo, "show", f"gitrun/r:{OUTPUT}")
    assert json.loads(committed) == {"done": True}
    assert git(git_repo, "status", "--porcelain", "--untracked-files=no") == ""
    # codex ran the scripted command and reported its result back.
    assert len(outputs) == 1
    first = requests[0].body
    assert first["model"] == "gpt-mock" and first["stream"] is True
    prompt = json.dumps(first["input"])
    assert "gitrun run r, task t1" in prompt and OUTPUT in prompt
    # Its session is kept (no --ephemeral) under the id the ledger records,
    # for a try that would continue it (tests/realclient/test_real_salvage.py).
    [record] = [r for r in ledger_records(git_repo) if "outcome" in r]
    saved = list((tmp_path / "home" / ".codex").glob("sessions/**/*.jsonl"))
    assert [p.name for p in saved] == [p.name for p in saved if record["conversation"] in p.name]
    assert len(saved) == 1


def test_an_unreachable_endpoint_halts_the_run_well_before_the_timeout(
    git_repo: Path, tmp_path: Path
) -> None:
    """codex loops "Reconnecting... waiting for network" forever; the run
    halts as an environment fault instead of waiting out 90 s per attempt."""
    client_binary("codex")
    _run(git_repo)
    with socket.socket() as probe:  # a port nothing listens on: connections are refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = codex_env(tmp_path, f"http://127.0.0.1:{port}/v1")
    began = time.monotonic()
    done = gitrun(git_repo, env, "start", "r")
    took = time.monotonic() - began
    assert done.returncode == 3, done.stdout + done.stderr
    assert "environment fault: t1 attempt 1: codex reported 2 times in a row" in done.stdout
    assert took < 90, f"took {took:.1f} s"  # one attempt's timeout
    records = [r for r in ledger_records(git_repo) if "outcome" in r]
    assert [(r["attempt"], r["outcome"], r["timed_out"]) for r in records] == [
        (1, "missing", False)
    ]
    halts = [r for r in ledger_records(git_repo) if r.get("event") == "halt"]
    assert [h["kind"] for h in halts] == [governor.ENVIRONMENT]


def test_the_tokens_codex_reported_reach_the_ledger_with_the_cached_input_apart(
    git_repo: Path, tmp_path: Path
) -> None:
    """`codex exec --json` reports its session's tokens in
    `turn.completed`; the ledger keeps them as served (input counted without
    its cached part), with the model it was asked for and no cost (codex
    states none: unknown, not zero)."""
    from gitrun.store.ledger import attempt_records, usage_totals
    from gitrun.store.usage import Usage
    from tests.helpers import committed_ledger

    client_binary("codex")
    _run(git_repo)
    write = shell(f"mkdir -p out && printf '%s' '{{\"done\": true}}' > {OUTPUT}")
    tokens = {"input_tokens": 900, "cached_tokens": 600, "output_tokens": 70}
    with OpenAIMock([write, Reply("Wrote out/t1.json.")], **tokens, reasoning_tokens=30) as api:
        env = codex_env(tmp_path, api.url + "/v1")
        done = gitrun(git_repo, env, "start", "r")
        answered = api.answered
    assert done.returncode == 0, done.stdout + done.stderr
    assert answered >= 2  # the command, then the closing message
    [record] = attempt_records(committed_ledger(git_repo))
    assert record["outcome"] == "valid"
    assert (
        record["usage"]
        == Usage(
            (900 - 600) * answered, 70 * answered, 600 * answered, 0, None, "gpt-mock"
        ).to_json()
    )
    totals = usage_totals(committed_ledger(git_repo))
    assert totals.unknown_cost == 1 and totals.spent_usd == 0


def test_a_careless_codex_worker_confined_changes_nothing_of_anyone_else(
    git_repo: Path, tmp_path: Path
) -> None:
    """Under bubblewrap, codex's shell writes outside its task's paths fail
    or stay in its staging directory (codex's own sandbox runs inside)."""
    from tests.realclient.careless import (
        CARELESS,
        assert_nothing_of_anyone_else_changed,
        careless_run,
        needs_bubblewrap,
    )

    client_binary("codex")
    needs_bubblewrap()
    config = careless_run(git_repo, "codex", "gpt-mock")
    script = [shell(CARELESS), Reply("Done."), shell(CARELESS), Reply("Done.")]
    with OpenAIMock(script) as api:
        done = gitrun(git_repo, codex_env(tmp_path, api.url + "/v1"), "start", "r")
        outputs = api.function_outputs()
    said = done.stdout + done.stderr + json.dumps(outputs)
    assert done.returncode == 0, said
    assert_nothing_of_anyone_else_changed(git_repo, config, said)
    # What codex's command was told: the protected file, the git config and
    # the neighbour's output in its own folder refused at once.
    told = outputs[min(outputs)]  # t1's command (t2's id comes later)
    assert "Read-only file system" in told
    assert "secret: refused" in told and "config: refused" in told, told
    assert "t2: refused" in told, told


# --- the three kinds of "no", as codex exec reports them -----------------------------


def _refusing_env(tmp_path: Path, base_url: str) -> dict[str, str]:
    """codex against the mock, retrying nothing itself (gitrun decides)."""
    return codex_env(tmp_path, base_url, "request_max_retries = 0\nstream_max_retries = 0\n")


def test_a_throttle_from_codex_uses_no_attempt(git_repo: Path, tmp_path: Path) -> None:
    from tests.realclient.scripted import Refuse

    client_binary("codex")
    _run(git_repo)
    busy = Refuse(429, {"error": {"type": "rate_limit_exceeded", "message": "Rate limit reached"}})
    write = shell(f"mkdir -p out && printf '%s' '{{\"done\": true}}' > {OUTPUT}")
    with OpenAIMock([busy, write, Reply("Wrote it.")]) as api:
        done = gitrun(git_repo, _refusing_env(tmp_path, api.url + "/v1"), "start", "r")
    assert done.returncode == 0, done.stdout + done.stderr
    records = [r for r in ledger_records(git_repo) if "outcome" in r]
    assert [(r["attempt"], r["outcome"]) for r in records] == [(1, "throttled"), (1, "valid")]
    assert "429 Too Many Requests" in str(records[0].get("said")), records[0]


def test_a_usage_limit_from_codex_parks_the_run_until_its_reset(
    git_repo: Path, tmp_path: Path
) -> None:
    """codex says "You've hit your usage limit ... try again at 5:47 PM"
    (the machine's time): the run parks until then and uses no attempt."""
    import subprocess
    import sys

    from tests.realclient.scripted import Refuse

    client_binary("codex")
    _run(git_repo)
    reset = int(time.time()) + 3600
    error = {"type": "usage_limit_reached", "message": "The usage limit has been reached"}
    quota = Refuse(429, {"error": {**error, "plan_type": "plus", "resets_at": reset}})
    with OpenAIMock([quota]) as api:
        env = _refusing_env(tmp_path, api.url + "/v1")
        driver = subprocess.Popen(
            [sys.executable, "-m", "gitrun", "start", "r"],
            cwd=git_repo,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 90
            while not [r for r in ledger_records(git_repo) if r.get("event") == "park"]:
                assert time.monotonic() < deadline and driver.poll() is None
                time.sleep(0.1)
        finally:
            driver.terminate()
            driver.wait(timeout=60)
    [park] = [r for r in ledger_records(git_repo) if r.get("event") == "park"]
    assert park["reason"] == "usage limit of codex"
    from datetime import datetime

    until = datetime.fromisoformat(str(park["until"])).timestamp()
    assert reset - 60 <= until <= reset, (park, reset)  # codex states the minute
    records = [r for r in ledger_records(git_repo) if "outcome" in r]
    assert [(r["attempt"], r["outcome"]) for r in records][:1] == [(1, "throttled")]


def test_a_billing_refusal_from_codex_halts_the_run_at_once(git_repo: Path, tmp_path: Path) -> None:
    from tests.realclient.scripted import Refuse

    client_binary("codex")
    _run(git_repo)
    message = "You exceeded your current quota, please check your plan and billing details."
    billing = Refuse(429, {"error": {"type": "insufficient_quota", "message": message}})
    with OpenAIMock([billing, billing]) as api:
        done = gitrun(git_repo, _refusing_env(tmp_path, api.url + "/v1"), "start", "r")
        asked = len(api.requests)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "billing: codex said 'turn failed: Quota exceeded. Check your plan and billing" in (
        done.stdout
    )
    records = [r for r in ledger_records(git_repo) if "outcome" in r]
    assert [(r["attempt"], r["outcome"]) for r in records] == [(1, "unstarted")]
    assert asked == 1
