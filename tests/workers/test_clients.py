"""Environment faults of the real clients, with stand-ins named like them.

A stand-in is a small script called ``codex``, ``gemini`` or ``aider`` that
prints what the real client prints when its model cannot be reached or it
cannot authenticate (the lines are copied from the clients, see
gitrun/workers/clients.py), run by a real ``gitrun start``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from gitrun.commands.session import start_run
from gitrun.engine import governor
from gitrun.workers.clients import UnreachableWatch
from gitrun.workers.presets import PRESETS, client_signs
from tests.helpers import ledger_records, write_run

quiet = lambda _line: None  # noqa: E731

CODEX_LINE = "ERROR: Reconnecting... waiting for network\n"
# aider through litellm, wrapped at 80 columns as it prints without a terminal
AIDER_CYCLE = (
    "litellm.InternalServerError: InternalServerError: OpenAIException - Connection \n"
    "error.\n"
    "The API provider's servers are down or overloaded.\n"
    "Retrying in 0.5 seconds...\n"
)
GEMINI_CYCLE = (
    "Attempt 1 failed. Retrying with backoff... Error: exception TypeError: fetch failed "
    "sending request\n" + "    at async retryWithBackoff (file:///bundle/chunk.js:1:1)\n" * 10
)


def _watch(program: str) -> UnreachableWatch:
    found = client_signs([f"/opt/bin/{program}", "exec"])
    assert found is not None
    return UnreachableWatch(*found)


# -- the watch, line by line ------------------------------------------------------------


def test_codex_reconnecting_twice_in_a_row_is_a_fault() -> None:
    watch = _watch("codex")
    assert watch.feed(b"OpenAI Codex v0.171.0\nwarning: model metadata\n") is None
    assert watch.feed(CODEX_LINE.encode()) is None
    fault = watch.feed(CODEX_LINE.encode())
    assert fault is not None
    assert fault.startswith("codex reported 2 times in a row that it cannot reach its model")
    assert "Reconnecting... waiting for network" in fault
    assert fault.endswith("then `gitrun retry` and `gitrun resume`")


def test_a_reconnect_followed_by_work_is_not_a_fault() -> None:
    watch = _watch("codex")
    assert watch.feed(CODEX_LINE.encode()) is None
    assert watch.feed(b"exec bash -lc 'ls'\n") is None
    assert watch.feed(CODEX_LINE.encode()) is None  # one in a row again
    # a bounded retry ends by itself: not the endless loop
    assert watch.feed(b"ERROR: Reconnecting... 1/5\nERROR: Reconnecting... 2/5\n") is None


def test_a_report_split_across_chunks_and_wrapped_across_lines_counts() -> None:
    watch = _watch("aider")
    text = (AIDER_CYCLE * 3).encode()
    results = [watch.feed(text[i : i + 7]) for i in range(0, len(text), 7)]
    first = next(i for i, r in enumerate(results) if r is not None)
    said = results[first]
    assert said is not None and "OpenAIException - Connection error." in said
    # It fires on the line that completes the third report, not before.
    assert text[: first * 7].count(b"Connection \nerror.") == 2
    assert text[: (first + 1) * 7].count(b"Connection \nerror.\n") == 3


def test_aider_two_connection_errors_then_an_answer_is_not_a_fault() -> None:
    watch = _watch("aider")
    assert watch.feed((AIDER_CYCLE * 2).encode()) is None
    assert watch.feed(b"out/t1.json\n```\n" + b'{"ok": 1}\n' * 12 + b"```\n") is None
    assert watch.feed(AIDER_CYCLE.encode()) is None


def test_gemini_fetch_failures_with_their_stack_traces_count_in_a_row() -> None:
    watch = _watch("gemini")
    assert watch.feed(GEMINI_CYCLE.encode()) is None
    fault = watch.feed(GEMINI_CYCLE.encode())
    assert fault is not None and "fetch failed" in fault


def test_signs_belong_to_the_program_not_to_the_preset() -> None:
    assert client_signs(["my-agent", "codex"]) is None
    assert client_signs([]) is None
    gemini = PRESETS["gemini"].signs
    assert gemini is not None
    assert client_signs(["/usr/local/bin/gemini"]) == ("gemini", gemini)


# -- through a real run ------------------------------------------------------------------


def _client(tmp_path: Path, name: str, body: str) -> str:
    """A stand-in script named ``name``; it runs ``body`` (Python) with
    ``out`` = its task's first output and ``attempt`` = its attempt number."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(
        f"#!{sys.executable}\n"
        "import os, sys, time\n"
        "out = os.environ['GITRUN_OUTPUTS'].split('\\n')[0]\n"
        "attempt = int(os.environ['GITRUN_ATTEMPT'])\n"
        "def say(text):\n"
        "    sys.stdout.write(text)\n"
        "    sys.stdout.flush()\n"
        "def write():\n"
        "    os.makedirs(os.path.dirname(out), exist_ok=True)\n"
        "    open(out, 'w').write('{\"ok\": 1}')\n" + body
    )
    path.chmod(0o755)
    return str(path)


def _run(repo: Path, program: str, count: int = 3, **limits: object) -> None:
    tasks = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, count + 1)]
    packet = {
        "executor": {"command": [program, "{pointer}"]},
        "limits": {"canary": 0, "concurrency": 1, "max_attempts": 3, "timeout": "60s", **limits},
    }
    write_run(repo, "r", tasks, packet)


def test_codex_that_keeps_reconnecting_halts_the_run_long_before_its_timeout(
    git_repo: Path, tmp_path: Path
) -> None:
    body = (
        f"say('OpenAI Codex v0.171.0\\n')\n"
        f"for _ in range(600):\n    say({CODEX_LINE!r})\n    time.sleep(0.1)\n"
    )
    _run(git_repo, _client(tmp_path, "codex", body))
    began = time.monotonic()
    outcome = start_run(git_repo, "r", quiet)
    took = time.monotonic() - began
    assert outcome.exit_code == 3
    assert outcome.halt is not None and outcome.halt.kind == governor.ENVIRONMENT
    assert outcome.halt.message.startswith(
        "environment fault: t1 attempt 1: codex reported 2 times in a row that it cannot reach "
        "its model"
    )
    assert outcome.status.spawns == 1
    assert took < 60  # the timeout: the stand-in would print for 60 s
    records = [r for r in ledger_records(git_repo) if "outcome" in r]
    assert [(r["task"], r["outcome"], r["timed_out"]) for r in records] == [
        ("t1", "missing", False)
    ]
    assert [r["kind"] for r in ledger_records(git_repo) if r.get("event") == "halt"] == [
        governor.ENVIRONMENT
    ]


def test_gemini_exit_41_halts_after_one_attempt(git_repo: Path, tmp_path: Path) -> None:
    """Before, the breaker needed max(3, concurrency) such attempts in a row."""
    body = "say('Invalid auth method selected.\\n')\nsys.exit(41)\n"
    _run(git_repo, _client(tmp_path, "gemini", body))
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 3
    assert outcome.halt is not None and outcome.halt.kind == governor.ENVIRONMENT
    assert outcome.halt.message == (
        "environment fault: t1 attempt 1: gemini exited 41, an authentication error; set "
        "GEMINI_API_KEY (or the auth type in ~/.gemini/settings.json), then `gitrun retry` and "
        "`gitrun resume`"
    )
    assert outcome.status.spawns == 1


def test_aider_refused_connection_is_a_fault_not_a_throttle(git_repo: Path, tmp_path: Path) -> None:
    """aider says "servers are down or overloaded" about a refused connection,
    which the throttle patterns would read as a rate limit and back off forever."""
    body = f"for _ in range(8):\n    say({AIDER_CYCLE!r})\n    time.sleep(0.2)\n"
    _run(git_repo, _client(tmp_path, "aider", body), backoff_base="0.05s")
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 3
    assert outcome.halt is not None and outcome.halt.kind == governor.ENVIRONMENT
    assert "aider reported 3 times in a row that it cannot reach its model" in outcome.halt.message
    outcomes = [r["outcome"] for r in ledger_records(git_repo) if "outcome" in r]
    assert outcomes == ["missing"]


def test_a_valid_output_outweighs_the_exit_code(git_repo: Path, tmp_path: Path) -> None:
    """Done means validated files: gemini that wrote its output and then
    exited 41 (its final turn failed) finished its task."""
    body = "write()\nsys.exit(41)\n"
    _run(git_repo, _client(tmp_path, "gemini", body))
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 0 and outcome.halt is None


@pytest.mark.parametrize("name", ["my-agent", "codex-helper"])
def test_another_program_saying_the_same_is_judged_as_before(
    git_repo: Path, tmp_path: Path, name: str
) -> None:
    body = (
        "if os.environ['GITRUN_TASK'] == 't1' and attempt == 1:\n"
        f"    say({CODEX_LINE!r} * 3)\n    sys.exit(41)\n"
        f"say({CODEX_LINE!r} * 3)\nwrite()\n"
    )
    _run(git_repo, _client(tmp_path, name, body))
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 0 and outcome.halt is None
    outcomes = [r["outcome"] for r in ledger_records(git_repo) if "outcome" in r]
    assert outcomes == ["missing", "valid", "valid", "valid"]


def test_no_stand_in_outlives_its_run(git_repo: Path, tmp_path: Path) -> None:
    started = tmp_path / "started"
    body = (
        f"open({str(started)!r}, 'w').close()\n"
        f"for _ in range(600):\n    say({CODEX_LINE!r})\n    time.sleep(0.1)\n"
    )
    program = _client(tmp_path, "codex", body)
    _run(git_repo, program, count=1)
    assert start_run(git_repo, "r", quiet).exit_code == 3
    assert started.exists()
    # Found by its program's path (its pid is a PID namespace's own, when confined).
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        running = [pid for pid in os.listdir("/proc") if pid.isdigit() and _runs(pid, program)]
        if not running:
            return
        time.sleep(0.05)
    pytest.fail(f"the stand-in codex (pid {running}) is still running")


def _runs(pid: str, program: str) -> bool:
    try:
        return program.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
