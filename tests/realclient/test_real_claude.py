"""Write-time ownership inside the real Claude Code CLI.

Each test drives ``claude -p`` against the scripted mock model on
127.0.0.1 (no network, no API key) in a real repository with gitrun's hooks
installed by ``gitrun hooks install``, as a worker that gitrun launched for
task t1 (``GITRUN_RUN``/``GITRUN_TASK`` in its environment). Skipped, with
the reason, when the CLI is not installed (``.ci/install-clients``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import commit_all, ledger_records, write_run
from tests.realclient.claude import (
    claude_binary,
    claude_env,
    gitrun_bin_dir,
    run_claude,
    sandbox_or_skip,
)
from tests.realclient.mockmodel import MockModel, Turn, bash, edit, say, write

pytestmark = pytest.mark.realclient

WORKER = {"GITRUN_RUN": "r", "GITRUN_TASK": "t1"}


@pytest.fixture
def repo(git_repo: Path, tmp_path: Path) -> Path:
    """A repository with run r (t1 owns out/t1.json) and gitrun's hooks,
    installed by the real command with this gitrun first on PATH."""
    claude_binary()  # skip before any work when the client is missing
    write_run(git_repo, "r", [{"id": "t1", "outputs": ["out/t1.json"]}])
    commit_all(git_repo, "run r")
    env = {**os.environ, "PATH": os.pathsep.join([gitrun_bin_dir(), os.environ["PATH"]])}
    subprocess.run(
        [sys.executable, "-m", "gitrun", "hooks", "install", "--claude"],
        cwd=git_repo,
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    (tmp_path / "home").mkdir()
    return git_repo


def _drive(
    repo: Path, script: list[Turn], *, path: str | None = None, **env: str
) -> tuple[MockModel, dict[str, Any]]:
    """One worker session: the client runs the script to its end."""
    with MockModel(script) as model:
        proc = run_claude(
            repo,
            "Follow the packet.",
            claude_env(repo.parent / "home", model.url, path=path, **{**WORKER, **env}),
        )
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert model.served_turns == len(script) and model.overrun == 0
    return model, json.loads(proc.stdout)


def _hooks_status(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitrun", "hooks", "status", "--claude"],
        cwd=repo,
        env={**os.environ, "PATH": os.pathsep.join([gitrun_bin_dir(), os.environ["PATH"]])},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _set_write_hook(repo: Path, command: str) -> None:
    path = repo / ".claude/settings.json"
    settings = json.loads(path.read_text())
    settings["hooks"]["PreToolUse"][0]["hooks"][0]["command"] = command
    path.write_text(json.dumps(settings))


def test_an_owned_write_is_allowed_and_lands(repo: Path) -> None:
    model, result = _drive(repo, [write(str(repo / "out/t1.json"), '{"ok": 1}'), say("done")])
    assert (repo / "out/t1.json").read_text() == '{"ok": 1}'
    [call] = model.tool_use_ids()
    is_error, text = model.tool_result(call)
    assert not is_error and "out/t1.json" in text
    assert result["permission_denials"] == [] and result["result"] == "done"


def _linked(repo: Path) -> Path:
    """``alias`` -> ``docs``: a link made in the tree after the run was checked,
    through which ``alias/t1.json`` names ``docs/t1.json``."""
    (repo / "docs").mkdir()
    (repo / "alias").symlink_to("docs")
    return repo / "alias"


@pytest.mark.parametrize(
    ("turn", "stray", "said"),
    [
        (lambda r: write(str(r / "src/stray.py"), "x = 1\n"), "src/stray.py", "is not among them"),
        (lambda r: write(str(r / "TODO.md"), "mine\n"), "TODO.md", "may not write the shared"),
        (lambda r: write(str(r / "out/../../outside.txt"), "x"), "../outside.txt", "outside the"),
        (lambda r: edit(str(r / "README.md"), "sample", "changed"), "README.md", "not among"),
        (lambda r: write(str(r.parent / "elsewhere.txt"), "x"), "../elsewhere.txt", "outside the"),
        (lambda r: write(str(_linked(r) / "t1.json"), "x"), "docs/t1.json", "may"),
    ],
    ids=["write", "protected", "dotdot", "edit", "absolute-outside", "through-a-symlink"],
)
def test_a_write_outside_the_task_s_owns_is_denied_and_the_model_is_told(
    repo: Path, turn: Callable[[Path], Turn], stray: str, said: str
) -> None:
    before = (repo / "README.md").read_text()
    model, result = _drive(repo, [turn(repo), say("done")])
    assert not (repo / stray).exists() or (repo / stray).read_text() == before
    [call] = model.tool_use_ids()
    is_error, text = model.tool_result(call)
    assert is_error and "gitrun task t1 may" in text and said in text, text
    assert [d["tool_use_id"] for d in result["permission_denials"]] == [call]


def test_the_client_lets_a_write_through_when_a_plain_hook_cannot_start(repo: Path) -> None:
    """The fact behind fail-closed: Claude Code blocks only on
    exit 2, so a hook command that exits 127 (a stale interpreter path, as
    gitrun installed before) lets a stray write through."""
    assert _hooks_status(repo).returncode == 0
    _set_write_hook(repo, "/gone/venv/bin/python -m gitrun hook pre-write")
    model, _ = _drive(repo, [write(str(repo / "src/stray.py"), "x = 1\n"), say("done")])
    assert (repo / "src/stray.py").read_text() == "x = 1\n"
    assert model.tool_result(model.tool_use_ids()[0])[0] is False
    status = _hooks_status(repo)  # and `gitrun hooks status` says so
    assert status.returncode == 1 and "Claude Code lets every write through" in status.stdout


def test_the_installed_hook_blocks_when_gitrun_cannot_start(repo: Path, tmp_path: Path) -> None:
    """The command `gitrun hooks install` writes, in a session where gitrun
    is not on PATH (a clone without it): every write is blocked, the owned
    one too, and the model is told why."""
    system = os.pathsep.join(
        p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "gitrun").exists()
    )
    script = [
        write(str(repo / "src/stray.py"), "x = 1\n"),
        write(str(repo / "out/t1.json"), "{}"),
        say("done"),
    ]
    model, _ = _drive(repo, script, path=system)
    assert not (repo / "src/stray.py").exists() and not (repo / "out/t1.json").exists()
    for call in model.tool_use_ids():
        is_error, text = model.tool_result(call)
        assert is_error and "gitrun's hook could not run (status 127)" in text, text


def test_bash_cannot_write_in_the_repository_from_the_installed_sandbox(repo: Path) -> None:
    """What the write hook cannot see: with acceptEdits, a shell
    redirection inside the repository runs without asking. `gitrun hooks
    install` puts the sandbox in .claude/settings.local.json: the same write
    fails at the OS level. Without it, the write goes through (the audit
    reports it afterwards)."""
    sandbox_or_skip()
    model, _ = _drive(repo, [bash("echo stray > stray.txt; sed -i s/a/b/ README.md"), say("done")])
    assert not (repo / "stray.txt").exists()
    is_error, text = model.tool_result(model.tool_use_ids()[0])
    assert is_error and "Read-only file system" in text, text
    uninstalled = subprocess.run(
        [sys.executable, "-m", "gitrun", "hooks", "uninstall", "--claude"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "removed gitrun's Bash sandbox" in uninstalled.stdout, uninstalled.stdout
    _drive(repo, [bash("echo stray > stray.txt"), say("done")])
    assert (repo / "stray.txt").read_text() == "stray\n"


def test_the_claude_preset_s_settings_enforce_ownership_without_installed_hooks(
    repo: Path,
) -> None:
    """The claude preset passes gitrun's hooks with `--settings` JSON, and
    claude -p silently ignores settings that fail its validation: the real
    client must run them (here with no hooks in .claude/settings.json)."""
    from gitrun.workers.executor import claude_settings

    sandbox_or_skip()
    (repo / ".claude/settings.json").unlink()
    (repo / ".claude/settings.local.json").unlink(missing_ok=True)
    script = [
        write(str(repo / "out/t1.json"), "{}"),
        write(str(repo / "src/stray.py"), "x = 1\n"),
        say("done"),
    ]
    with MockModel(script) as model:
        proc = run_claude(
            repo,
            "Follow the packet.",
            claude_env(repo.parent / "home", model.url, **WORKER),
            "--settings",
            claude_settings(repo),
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (repo / "out/t1.json").exists() and not (repo / "src/stray.py").exists()
    owned, stray = model.tool_use_ids()
    assert model.tool_result(owned)[0] is False
    is_error, text = model.tool_result(stray)
    assert is_error and "src/stray.py is not among them" in text


def test_gitrun_start_with_the_claude_preset_confines_bash_and_commits_the_owned_write(
    repo: Path, tmp_path: Path
) -> None:
    """The whole command-mode path: `gitrun start` renders the claude preset
    (its --settings filled for this repository) and launches the real
    client, whose Bash cannot write in the repository while its owned Write
    lands and is committed."""

    sandbox_or_skip()
    (repo / ".claude/settings.json").unlink()  # only what the preset passes
    (repo / ".claude/settings.local.json").unlink(missing_ok=True)
    packet = {
        "executor": {"preset": "claude"},
        "model": {"default": "claude-mock-1"},
        "limits": {"canary": 0, "concurrency": 1, "timeout": "60s"},
    }
    write_run(repo, "c", [{"id": "t1", "outputs": ["out/c1.json"]}], packet)
    commit_all(repo, "run c")
    script = [
        bash("echo stray > stray.txt"),
        write(str(repo / "src/stray.py"), "x = 1\n"),
        write(str(repo / "out/c1.json"), '{"ok": 1}'),
        say("done"),
    ]
    with MockModel(script) as model:
        proc = _start_with_claude(repo, model.url)
        assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
        shell, stray, owned = model.tool_use_ids()
        # The stray Bash write is stopped by the client's own sandbox (its
        # bubblewrap, the repository read-only), the stray Write by gitrun's hook.
        is_error, text = model.tool_result(shell)
        assert is_error and "Read-only file system" in text, text
        is_error, text = model.tool_result(stray)
        assert is_error and "src/stray.py is not among them" in text, text
        assert not model.tool_result(owned)[0]
    assert not (repo / "stray.txt").exists() and not (repo / "src/stray.py").exists()
    committed = subprocess.run(
        ["git", "show", "gitrun/c:out/c1.json"], cwd=repo, capture_output=True, text=True
    )
    assert committed.stdout == '{"ok": 1}', committed.stderr
    # What the client writes of its own (its sandbox's marker in .git/info/)
    # is no ownership violation: the stray writes were stopped, so none is.
    violations = [r for r in ledger_records(repo, "c") if r.get("event") == "violation"]
    assert violations == [], violations


def test_gitrun_start_records_the_tokens_and_cost_the_real_client_reported(
    repo: Path, tmp_path: Path
) -> None:
    """The claude preset's closing JSON object reaches the ledger:
    the tokens are what the mock served (every message, side requests too),
    the cost is what the client stated, and the result is the attempt's tail."""
    from gitrun.store.ledger import attempt_records, usage_totals
    from gitrun.store.local import LocalPaths
    from gitrun.store.usage import Usage as Reported
    from tests.helpers import committed_ledger
    from tests.realclient.mockmodel import Usage

    packet = {
        "executor": {"preset": "claude", "bash": "deny"},
        "model": {"default": "claude-mock-1"},
        "limits": {"canary": 0, "concurrency": 1, "timeout": "60s"},
    }
    write_run(repo, "c", [{"id": "t1", "outputs": ["out/c1.json"]}], packet)
    commit_all(repo, "run c")
    script = [
        Turn(write(str(repo / "out/c1.json"), '{"ok": 1}').blocks, Usage(1200, 80, 300, 5000)),
        Turn(say("All done.").blocks, Usage(1500, 30, 0, 6200)),
    ]
    with MockModel(script) as model:
        proc = _start_with_claude(repo, model.url)
        served = model.served_usage
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    [record] = attempt_records(committed_ledger(repo, "gitrun/c", "c"))
    log = LocalPaths.of(repo, "c").log_of("t1", 1).read_text()
    said = json.loads(next(ln for ln in log.splitlines() if ln.startswith('{"')))
    assert record["outcome"] == "valid" and said["result"] == "All done."
    assert set(served) == {"claude-mock-1"}
    mock = served["claude-mock-1"]
    assert mock.input_tokens >= 2700  # the two turns, and any side request
    assert (
        record["usage"]
        == Reported(
            mock.input_tokens,
            mock.output_tokens,
            mock.cache_read_input_tokens,
            mock.cache_creation_input_tokens,
            said["total_cost_usd"],
            "claude-mock-1",
        ).to_json()
    )
    assert said["total_cost_usd"] > 0
    totals = usage_totals(committed_ledger(repo, "gitrun/c", "c"))
    assert totals.unknown_cost == 0 and totals.spent_usd == pytest.approx(said["total_cost_usd"])


def _start_with_claude(repo: Path, url: str) -> subprocess.CompletedProcess[str]:
    """`gitrun start c` with the installed claude on PATH, talking to ``url``."""
    from tests.realclient.claude import INSTALLED
    from tests.realclient.clis import gitrun

    env = claude_env(repo.parent / "home", url)
    env["PATH"] = os.pathsep.join([str(INSTALLED.parent), env["PATH"]])
    return gitrun(repo, env, "start", "c")


# --- the three kinds of "no", as claude -p reports them -------------------------------

RESET_HEADERS = (
    ("anthropic-ratelimit-unified-status", "rejected"),
    ("anthropic-ratelimit-unified-5h-status", "rejected"),
    ("anthropic-ratelimit-unified-representative-claim", "five_hour"),
)


def _refusal_run(repo: Path, tasks: int = 2) -> None:
    (repo / ".claude/settings.json").unlink()  # only what the preset passes
    (repo / ".claude/settings.local.json").unlink(missing_ok=True)
    packet = {
        "executor": {"preset": "claude"},
        "model": {"default": "claude-mock-1"},
        "limits": {"canary": 0, "concurrency": 1, "max_attempts": 1, "timeout": "60s"},
    }
    table = [{"id": f"t{i}", "outputs": [f"out/c{i}.json"]} for i in range(1, tasks + 1)]
    write_run(repo, "c", table, packet)
    commit_all(repo, "run c")


def test_a_throttle_from_claude_uses_no_attempt_and_the_task_goes_out_again(
    repo: Path,
) -> None:
    """A 429 that is no usage limit: claude says "Request rejected (429) ·
    Server is temporarily limiting requests"; gitrun backs off, no attempt used."""
    from tests.realclient.mockmodel import Failure

    sandbox_or_skip()
    _refusal_run(repo, tasks=1)
    throttle = Failure(headers=(("retry-after", "120"),))  # over a minute: claude gives up
    script = [throttle, write(str(repo / "out/c1.json"), '{"ok": 1}'), say("done")]
    with MockModel(script) as model:
        proc = _start_with_claude(repo, model.url)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    records = [r for r in ledger_records(repo, "c") if "outcome" in r]
    assert [(r["attempt"], r["outcome"]) for r in records] == [(1, "throttled"), (1, "valid")]
    assert not [r for r in ledger_records(repo, "c") if r.get("event") in ("park", "halt")]


def test_a_usage_limit_from_claude_parks_the_run_until_its_reset(repo: Path) -> None:
    """Signed in with a subscription, a rejected unified rate limit: claude
    says "You've hit your 5-hour limit · resets 5:45pm (UTC)"; the run parks
    until then, starts nothing, uses no attempt, and status says so."""
    import time

    from tests.realclient.claude import INSTALLED
    from tests.realclient.mockmodel import Failure

    sandbox_or_skip()
    _refusal_run(repo)
    reset = int(time.time()) + 3600
    headers = (*RESET_HEADERS, ("anthropic-ratelimit-unified-reset", str(reset)))
    quota = Failure(429, "rate_limit_error", "Rate limited", headers)
    with MockModel([quota]) as model:
        env = claude_env(
            repo.parent / "home", model.url, CLAUDE_CODE_OAUTH_TOKEN="sk-ant-oat01-mock"
        )
        env.pop("ANTHROPIC_API_KEY")
        env["PATH"] = os.pathsep.join([str(INSTALLED.parent), env["PATH"]])
        driver = subprocess.Popen(
            [sys.executable, "-m", "gitrun", "start", "c"],
            cwd=repo,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 90
            while not [r for r in ledger_records(repo, "c") if r.get("event") == "park"]:
                assert time.monotonic() < deadline and driver.poll() is None
                time.sleep(0.1)
            time.sleep(1.0)  # parked: nothing more starts
            status = subprocess.run(
                [sys.executable, "-m", "gitrun", "status", "c"],
                cwd=repo,
                env=env,
                capture_output=True,
                text=True,
            )
            asked = len(model.requests)
        finally:
            driver.terminate()
            driver.wait(timeout=60)
    [park] = [r for r in ledger_records(repo, "c") if r.get("event") == "park"]
    assert park["reason"] == "usage limit of claude"
    shown = time.strftime("%H:%M", time.gmtime(reset))  # claude states minutes
    assert str(park["until"])[11:16] == shown, park
    assert f"parked until {shown} UTC (usage limit of claude)" in status.stdout, status.stdout
    records = [r for r in ledger_records(repo, "c") if "outcome" in r]
    assert [(r["task"], r["outcome"]) for r in records][:1] == [("t1", "throttled")]
    assert "You've hit your 5-hour limit" in str(records[0].get("reason")), records[0]
    assert asked == 1  # t2 never went out


def test_a_billing_refusal_from_claude_halts_the_run_at_once(repo: Path) -> None:
    """A 400 with x-should-retry: false: claude says "Credit balance is too
    low"; the run halts with that sentence after one attempt, none used."""
    from tests.realclient.mockmodel import Failure

    sandbox_or_skip()
    _refusal_run(repo)
    message = "Your credit balance is too low to access the Anthropic API."
    billing = Failure(400, "invalid_request_error", message, (("x-should-retry", "false"),))
    with MockModel([billing, billing]) as model:
        proc = _start_with_claude(repo, model.url)
        asked = len(model.requests)
    assert proc.returncode == 3, (proc.stdout[-2000:], proc.stderr[-2000:])
    assert "billing: claude said 'Credit balance is too low'" in proc.stdout
    records = [r for r in ledger_records(repo, "c") if "outcome" in r]
    assert [(r["task"], r["outcome"]) for r in records] == [("t1", "unstarted")]
    [halt] = [r for r in ledger_records(repo, "c") if r.get("event") == "halt"]
    assert halt["kind"] == "billing" and asked == 1
