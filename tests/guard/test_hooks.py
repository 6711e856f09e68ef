"""Write-time ownership: the hooks as installed, run as real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gitrun.guard.install import (
    claude_hooks,
    install_claude,
    install_git,
    uninstall_claude,
    uninstall_git,
)
from tests.forkserver import run_gitrun_call
from tests.helpers import build_tree, git, write_run

WORKER = {"GITRUN_RUN": "r", "GITRUN_TASK": "t1"}
TASKS = [
    {"id": "t1", "outputs": ["out/t1.json"], "owns": ["out/t1.json", "notes/t1/**"]},
    {"id": "t2", "outputs": ["out/t2.json"]},
]


def fail_closed(command: str) -> str:
    """``command`` in the place of gitrun's write hook, wrapped the way the
    plugin's hooks.json wraps it: blocking on any failure."""
    written = claude_hooks("gitrun")["PreToolUse"][0]["hooks"][0]["command"]
    return command + written[len("gitrun hook pre-write") :]


def _hook_command(repo: Path, event: str) -> str:
    settings = json.loads((repo / ".claude/settings.json").read_text())
    [entry] = [e for e in settings["hooks"][event] if "gitrun" in json.dumps(e)]
    return str(entry["hooks"][0]["command"])


def _run_hook(
    repo: Path, command: str, payload: str, **env: str
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GITRUN_")}
    full_env.update(env)
    return subprocess.run(
        ["/bin/sh", "-c", command],
        input=payload,
        cwd=repo,
        capture_output=True,
        text=True,
        env=full_env,
    )


def _pre_tool_use(repo: Path, path: str, tool: str = "Write", **extra: object) -> str:
    payload = {
        "session_id": "s1",
        "transcript_path": "/tmp/transcript.jsonl",
        "cwd": str(repo),
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": {"file_path": str(repo / path), "content": "{}"},
        **extra,
    }
    return json.dumps(payload)


def _decision(proc: subprocess.CompletedProcess[str]) -> str | None:
    if not proc.stdout.strip():
        return None
    return str(json.loads(proc.stdout)["hookSpecificOutput"]["permissionDecision"])


pytestmark = pytest.mark.usefixtures("gitrun_on_path")

_PATH = os.environ.get("PATH", "/usr/bin:/bin")


@pytest.fixture
def hooked(git_repo: Path) -> Path:
    write_run(git_repo, "r", TASKS)
    install_claude(git_repo)
    return git_repo


def test_pre_write_in_a_child_process_task(hooked: Path) -> None:
    command = _hook_command(hooked, "PreToolUse")
    env = {"GITRUN_RUN": "r", "GITRUN_TASK": "t1"}
    inside = _run_hook(hooked, command, _pre_tool_use(hooked, "out/t1.json"), **env)
    assert (inside.returncode, _decision(inside)) == (0, None)
    nested = _run_hook(hooked, command, _pre_tool_use(hooked, "notes/t1/a/b.md", "Edit"), **env)
    assert (nested.returncode, _decision(nested)) == (0, None)
    outside = _run_hook(hooked, command, _pre_tool_use(hooked, "out/t2.json"), **env)
    assert outside.returncode == 0 and _decision(outside) == "deny"
    reason = json.loads(outside.stdout)["hookSpecificOutput"]["permissionDecisionReason"]
    assert "out/t1.json, notes/t1/**" in reason and "out/t2.json" in reason
    protected = _run_hook(hooked, command, _pre_tool_use(hooked, "TODO.md"), **env)
    assert _decision(protected) == "deny"
    escape = _run_hook(hooked, command, _pre_tool_use(hooked, "../elsewhere.txt"), **env)
    assert _decision(escape) == "deny"
    malformed = _run_hook(hooked, command, "{not json", **env)
    assert malformed.returncode == 2 and "malformed" in malformed.stderr


def test_pre_write_without_task_context_allows(hooked: Path) -> None:
    command = _hook_command(hooked, "PreToolUse")
    lead = _run_hook(hooked, command, _pre_tool_use(hooked, "anything/at/all.txt"))
    assert (lead.returncode, _decision(lead)) == (0, None)
    garbage = _run_hook(hooked, command, "{not json")
    assert (garbage.returncode, garbage.stdout) == (0, "")
    other_tool = _run_hook(hooked, command, json.dumps({"tool_name": "Bash", "tool_input": {}}))
    assert other_tool.returncode == 0


def test_any_subagent_is_denied_a_started_runs_protected_file(hooked: Path) -> None:
    command = _hook_command(hooked, "PreToolUse")
    payload = _pre_tool_use(hooked, "PROGRESS.md", agent_type="general-purpose", agent_id="x")
    assert _decision(_run_hook(hooked, command, payload)) is None  # the run has not started
    git(hooked, "branch", "gitrun/r")
    assert _decision(_run_hook(hooked, command, payload)) == "deny"
    lead = _pre_tool_use(hooked, "PROGRESS.md")  # the lead itself may
    assert _decision(_run_hook(hooked, command, lead)) is None


def test_subagent_stop_blocks_until_outputs_validate(hooked: Path) -> None:
    command = _hook_command(hooked, "SubagentStop")
    payload = {
        "cwd": str(hooked),
        "hook_event_name": "SubagentStop",
        "agent_type": "general-purpose",
        "agent_id": "a",
        "stop_hook_active": False,
    }
    held = _run_hook(hooked, command, json.dumps(payload), **WORKER)
    decision = json.loads(held.stdout)
    assert decision["decision"] == "block" and "out/t1.json: does not exist" in decision["reason"]
    again = _run_hook(hooked, command, json.dumps({**payload, "stop_hook_active": True}), **WORKER)
    assert (again.returncode, again.stdout) == (0, "")
    build_tree(hooked, {"out/t1.json": "{}"})
    done = _run_hook(hooked, command, json.dumps(payload), **WORKER)
    assert (done.returncode, done.stdout) == (0, "")


def test_settings_merge_keeps_other_hooks_is_idempotent_and_uninstalls_cleanly(
    git_repo: Path,
) -> None:
    original = {
        "permissions": {"allow": ["Bash(ls:*)"]},
        "hooks": {
            "PreToolUse": [
                {"matcher": "Bash", "hooks": [{"type": "command", "command": "audit.sh"}]}
            ],
            "Stop": [{"hooks": [{"type": "command", "command": "notify.sh"}]}],
        },
    }
    build_tree(git_repo, {".claude/settings.json": json.dumps(original, indent=2)})
    install_claude(git_repo)
    once = json.loads((git_repo / ".claude/settings.json").read_text())
    assert once["hooks"]["PreToolUse"][0] == original["hooks"]["PreToolUse"][0]
    assert once["hooks"]["Stop"] == original["hooks"]["Stop"]
    assert len(once["hooks"]["PreToolUse"]) == 2 and "SubagentStop" in once["hooks"]
    assert "already there" in install_claude(git_repo)
    assert json.loads((git_repo / ".claude/settings.json").read_text()) == once
    uninstall_claude(git_repo)
    assert json.loads((git_repo / ".claude/settings.json").read_text()) == original


def test_settings_created_by_install_are_removed_by_uninstall(git_repo: Path) -> None:
    install_claude(git_repo)
    assert (git_repo / ".claude/settings.json").exists()
    uninstall_claude(git_repo)
    assert not (git_repo / ".claude/settings.json").exists()


def test_broken_settings_are_not_overwritten(git_repo: Path) -> None:
    from gitrun.errors import GitrunError

    build_tree(git_repo, {".claude/settings.json": "{oops"})
    with pytest.raises(GitrunError, match="not valid JSON"):
        install_claude(git_repo)
    assert (git_repo / ".claude/settings.json").read_text() == "{oops"


def _commit(repo: Path, paths: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    for path in paths:
        build_tree(repo, {path: f"{path}\n"})
    subprocess.run(["git", "-C", str(repo), "add", *paths], check=True)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GITRUN_")}
    full_env.update(env)
    return subprocess.run(
        ["git", "-C", str(repo), "commit", "-q", "-m", "worker commit"],
        capture_output=True,
        text=True,
        env=full_env,
    )


def test_git_pre_commit_rejects_a_workers_commit_outside_its_owns(git_repo: Path) -> None:
    write_run(git_repo, "r", TASKS)
    hooks = git_repo / ".git/hooks"
    (hooks / "pre-commit").write_text(f"#!/bin/sh\necho ran >> {git_repo.parent / 'chained.log'}\n")
    (hooks / "pre-commit").chmod(0o755)
    assert "still runs" in install_git(git_repo)
    worker = {"GITRUN_RUN": "r", "GITRUN_TASK": "t1"}
    rejected = _commit(git_repo, ["out/t1.json", "src/other.py"], **worker)
    assert rejected.returncode != 0
    assert (
        "src/other.py" in rejected.stderr
        and "out/t1.json" not in rejected.stderr.split("outside")[-1]
    )
    git(git_repo, "reset", "-q")
    accepted = _commit(git_repo, ["out/t1.json"], **worker)
    assert accepted.returncode == 0, accepted.stderr
    user = _commit(git_repo, ["src/mine.py"])
    assert user.returncode == 0
    assert (git_repo.parent / "chained.log").read_text() == "ran\nran\n"
    assert "already there" in install_git(git_repo)
    uninstall_git(git_repo)
    assert "gitrun" not in (hooks / "pre-commit").read_text()


def test_git_hook_install_respects_core_hooks_path(git_repo: Path, tmp_path: Path) -> None:
    from gitrun.errors import GitrunError

    elsewhere = tmp_path / "shared-hooks"
    git(git_repo, "config", "core.hooksPath", str(elsewhere))
    with pytest.raises(GitrunError, match=r"core\.hooksPath"):
        install_git(git_repo)
    assert not elsewhere.exists()
    install_git(git_repo, force=True)
    assert (elsewhere / "pre-commit").exists()


def test_hook_cli_entry_points(hooked: Path) -> None:
    proc = run_gitrun_call(
        ["hook", "pre-write"],
        hooked,
        env={**os.environ, "GITRUN_RUN": "r", "GITRUN_TASK": "t1"},
        stdin=_pre_tool_use(hooked, "out/t2.json"),
    )
    assert proc.returncode == 0 and _decision(proc) == "deny"


def test_a_hook_input_nested_too_deep_to_parse_blocks_in_a_task_context(hooked: Path) -> None:
    """json.loads raises RecursionError (not ValueError) on it; Claude Code
    blocks only on exit 2, so anything else would let the write through."""
    command = _hook_command(hooked, "PreToolUse")
    deep = "[" * 100000 + "]" * 100000
    for env in ({"GITRUN_RUN": "r", "GITRUN_TASK": "t1"}, {"GITRUN_RUN": "r"}):
        proc = _run_hook(hooked, command, deep, **env)
        assert proc.returncode == 2, (env, proc.returncode, proc.stderr)
        assert proc.stderr.startswith("gitrun: malformed hook input")
        assert proc.stderr.rstrip().endswith("write blocked")
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    outside = _run_hook(hooked, command, deep)
    assert (outside.returncode, outside.stdout) == (0, "")  # not ours to judge


@pytest.mark.parametrize("agent_type", ["gitrun-worker", "gitrun-1-r-t1", "gitrun-"])
def test_a_subagent_with_gitrun_s_agent_type_but_no_dispatch_is_denied(
    hooked: Path, tmp_path: Path, agent_type: str
) -> None:
    """Fail closed: gitrun's agent type means a task's subagent, and one whose
    task cannot be found must not be treated as an unrelated session."""
    command = _hook_command(hooked, "PreToolUse")
    transcript = tmp_path / "session.jsonl"
    meta = tmp_path / "session/subagents/agent-x.meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"agentType": agent_type, "toolUseId": "toolu_unknown"}))
    payload = _pre_tool_use(
        hooked, "README.md", agent_type=agent_type, agent_id="x", transcript_path=str(transcript)
    )
    proc = _run_hook(hooked, command, payload)
    assert proc.returncode == 0 and _decision(proc) == "deny", (proc.stdout, proc.stderr)
    assert "the lead must dispatch the exact pointer" in proc.stdout


def test_any_unexpected_failure_of_a_hook_blocks_in_a_task_context(
    hooked: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI layer maps every unexpected exception to exit 2 (never the
    crash handler's 70) when a task is concerned. The core is replaced by one
    that raises, standing for any bug not found yet."""
    from typer.testing import CliRunner

    import gitrun.guard.write
    from gitrun.cli.main import app

    def broken(*_args: object) -> object:
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.chdir(hooked)
    for name in ("pre_write", "subagent_stop", "pre_commit"):
        monkeypatch.setattr(gitrun.guard.write, name, broken)
    runner = CliRunner()
    in_task = {"GITRUN_RUN": "r", "GITRUN_TASK": "t1"}
    for command in ("pre-write", "subagent-stop", "pre-commit"):
        result = runner.invoke(app, ["hook", command], input="{}", env=in_task)
        assert result.exit_code == 2, (command, result.exit_code, result.output)
        assert "cannot check this" in result.stderr and "a bug over two lines" in result.stderr
        assert result.stderr.count("\n") == 1
    agent = json.dumps({"agent_id": "a1", "agent_type": "gitrun-worker", "tool_name": "Write"})
    result = runner.invoke(app, ["hook", "pre-write"], input=agent, env={"GITRUN_RUN": ""})
    assert result.exit_code == 2, result.output


def test_a_task_context_that_cannot_identify_its_task_blocks(hooked: Path) -> None:
    """GITRUN_RUN without GITRUN_TASK was judged "no task" and allowed any
    write; through the real `gitrun hook pre-write` command it now blocks."""

    def pre_write(payload: str, **env: str) -> subprocess.CompletedProcess[str]:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("GITRUN_")}
        return run_gitrun_call(
            ["hook", "pre-write"], hooked, env={**full_env, **env}, stdin=payload, timeout=60
        )

    for env in ({"GITRUN_RUN": "r"}, {"GITRUN_RUN": "nope"}, {"GITRUN_TASK": "t1"}):
        for path in ("README.md", "out/t1.json", "TODO.md"):
            proc = pre_write(_pre_tool_use(hooked, path), **env)
            assert proc.returncode == 2, (env, path, proc.returncode, proc.stdout, proc.stderr)
            assert proc.stderr.rstrip().endswith("write blocked") and _decision(proc) is None
            assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    no_write = pre_write(json.dumps({"tool_name": "Read", "tool_input": {}}), GITRUN_RUN="r")
    assert no_write.returncode == 0  # not a write: nothing to judge


def test_git_pre_commit_rejects_a_commit_in_a_run_without_a_task(git_repo: Path) -> None:
    write_run(git_repo, "r", TASKS)
    install_git(git_repo)
    rejected = _commit(git_repo, ["src/other.py"], GITRUN_RUN="r")
    assert rejected.returncode != 0 and "commit rejected" in rejected.stderr


def _settings_command(repo: Path) -> str:
    return _hook_command(repo, "PreToolUse")


def _bin_dir(tmp: Path, **scripts: str) -> str:
    """A folder of tiny executables (name -> shell body), for a PATH of our choosing."""
    tmp.mkdir(parents=True, exist_ok=True)
    for name, body in scripts.items():
        (tmp / name).write_text(f"#!/bin/sh\n{body}\n")
        (tmp / name).chmod(0o755)
    return str(tmp)


def test_installed_hooks_call_gitrun_portably_never_through_this_interpreter(
    hooked: Path,
) -> None:
    """The settings travel with a clone: a venv's absolute interpreter path
    (what was written before) breaks in every other checkout."""
    settings = (hooked / ".claude/settings.json").read_text()
    assert sys.executable not in settings and str(Path(sys.executable).parent) not in settings
    assert _settings_command(hooked).startswith("gitrun hook pre-write || ")
    install_git(hooked)
    assert "gitrun hook pre-commit || exit 1" in (hooked / ".git/hooks/pre-commit").read_text()


def test_install_falls_back_to_python3_m_gitrun_and_refuses_when_neither_runs(
    git_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gitrun.errors import GitrunError

    system = "/usr/bin:/bin"  # git and sh, and no gitrun
    python3 = _bin_dir(tmp_path / "py", python3=f'exec "{sys.executable}" "$@"')
    monkeypatch.setenv("PATH", os.pathsep.join([python3, system]))
    install_claude(git_repo)
    assert _settings_command(git_repo).startswith("python3 -m gitrun hook pre-write || ")
    uninstall_claude(git_repo)
    broken = _bin_dir(tmp_path / "broken", python3="exit 1", gitrun="exit 1")
    monkeypatch.setenv("PATH", os.pathsep.join([broken, system]))
    for install in (install_claude, install_git):
        with pytest.raises(GitrunError, match=r"put gitrun on PATH .*, then install again"):
            install(git_repo)
    cli = run_gitrun_call(["hooks", "install"], git_repo, timeout=120)
    assert cli.returncode == 1 and cli.stderr.startswith("gitrun: error: neither `gitrun`")
    assert cli.stderr.count("\n") == 1 and cli.stdout == ""
    assert not (git_repo / ".claude/settings.json").exists()
    assert not (git_repo / ".git/hooks/pre-commit").exists()


def test_a_write_hook_that_cannot_start_blocks_with_exit_2(hooked: Path, tmp_path: Path) -> None:
    """Claude Code blocks only on exit 2: the command gitrun installed before
    (no wrapper) exited 127 when gitrun was not on PATH, and every write went
    through. Now every failure to start, or to run at all, is exit 2."""
    command = _settings_command(hooked)
    payload = _pre_tool_use(hooked, "out/t2.json")
    empty = _bin_dir(tmp_path / "empty")
    cases = [
        {"PATH": empty, **WORKER},  # a clone without gitrun
        {"PYTHONHOME": empty, **WORKER},  # an interpreter that cannot start
        {"PATH": empty},  # no task in the environment: the hook cannot know, so it blocks
    ]
    for env in cases:
        proc = _run_hook(hooked, command, payload, **env)
        assert proc.returncode == 2, (env, proc.returncode, proc.stderr)
        assert "gitrun: gitrun's hook could not run (status " in proc.stderr, proc.stderr
        assert "so this call is blocked" in proc.stderr
    assert command.split(" || ")[0] == "gitrun hook pre-write"
    unwrapped = _run_hook(hooked, "gitrun hook pre-write", payload, PATH=empty, **WORKER)
    assert unwrapped.returncode == 127  # what Claude Code treats as "go ahead"
    for status in ("1", "70", "126", "127", "137"):
        crashed = _run_hook(hooked, fail_closed(f"(exit {status})"), payload)
        assert crashed.returncode == 2 and f"(status {status})" in crashed.stderr
    allowed = _run_hook(hooked, fail_closed("(exit 0)"), payload)
    assert (allowed.returncode, allowed.stderr) == (0, "")
    # gitrun's own decisions pass through the wrapper untouched.
    denied = _run_hook(hooked, command, payload, **WORKER)
    assert (denied.returncode, _decision(denied), denied.stderr) == (0, "deny", "")
    blocked = _run_hook(hooked, command, payload, GITRUN_RUN="r")
    assert blocked.returncode == 2 and blocked.stderr.startswith("gitrun: cannot check this")
    assert "could not run" not in blocked.stderr


def test_installing_again_updates_an_old_gitrun_entry_in_place(hooked: Path) -> None:
    settings_path = hooked / ".claude/settings.json"
    user_entry = {"matcher": "Bash", "hooks": [{"type": "command", "command": "audit.sh"}]}
    old_entry = {
        "matcher": "Write|Edit|MultiEdit|NotebookEdit",
        "hooks": [{"type": "command", "command": "/gone/venv/bin/python -m gitrun hook pre-write"}],
    }
    old = json.loads(settings_path.read_text())
    old["hooks"]["PreToolUse"] = [old_entry, user_entry]
    settings_path.write_text(json.dumps(old))
    assert "installed" in install_claude(hooked)
    now = json.loads(settings_path.read_text())
    assert [e["hooks"][0]["command"].split(" || ")[0] for e in now["hooks"]["PreToolUse"]] == [
        "gitrun hook pre-write",
        "audit.sh",
    ]
    assert "already there" in install_claude(hooked)
    uninstall_claude(hooked)
    assert json.loads(settings_path.read_text())["hooks"] == {"PreToolUse": [user_entry]}


def _status(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GITRUN_")}
    full_env.update(env)
    return run_gitrun_call(["hooks", "status", *args], repo, env=full_env, timeout=120)


def _set_write_hook(repo: Path, command: str) -> None:
    path = repo / ".claude/settings.json"
    settings = json.loads(path.read_text())
    [entry] = [e for e in settings["hooks"]["PreToolUse"] if "pre-write" in json.dumps(e)]
    entry["hooks"][0]["command"] = command
    path.write_text(json.dumps(settings))


def test_hooks_status_runs_the_installed_hooks_and_says_whether_they_block(git_repo: Path) -> None:
    missing = _status(git_repo)
    assert missing.returncode == 1
    assert "FAIL  .claude/settings.json: no gitrun write hook" in missing.stdout
    assert "FAIL  .git/hooks/pre-commit: not installed" in missing.stdout
    subprocess.run(
        [sys.executable, "-m", "gitrun", "hooks", "install"], cwd=git_repo, check=True, timeout=120
    )
    healthy = _status(git_repo)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    from gitrun.guard.sandbox import missing_sandbox_tools

    sandboxed = (
        []
        if missing_sandbox_tools()
        else ["ok  .claude/settings.local.json: Bash runs in the sandbox with this clone read-only"]
    )
    assert healthy.stdout.splitlines() == [
        "ok  .claude/settings.json PreToolUse: runs: allows an owned write, denies one outside "
        "the task's owns, and blocks when it cannot identify the task or cannot start",
        *sandboxed,
        "ok  .git/hooks/pre-commit: runs: rejects a worker's commit it cannot check",
    ]
    # gitrun's hook as installed before: it runs and decides, but when it
    # cannot start Claude Code lets the write through.
    _set_write_hook(git_repo, "gitrun hook pre-write")
    unwrapped = _status(git_repo, "--claude")
    assert unwrapped.returncode == 1 and "does not fail closed" in unwrapped.stdout
    assert "status 127" in unwrapped.stdout and "pre-commit" not in unwrapped.stdout
    # A clone whose settings name an interpreter that is not there.
    _set_write_hook(git_repo, "/gone/venv/bin/python -m gitrun hook pre-write")
    stale = _status(git_repo, "--claude")
    assert stale.returncode == 1
    assert "does not run, and Claude Code lets every write through (status 127" in stale.stdout
    # The fail-closed form of the same stale command blocks every write.
    _set_write_hook(git_repo, fail_closed("/gone/venv/bin/python -m gitrun hook pre-write"))
    closed = _status(git_repo, "--claude")
    assert closed.returncode == 1 and "blocks even a write the task owns" in closed.stdout
    git_only = _status(git_repo, "--git")
    assert git_only.returncode == 0 and "settings" not in git_only.stdout


def test_hooks_status_finds_a_git_hook_that_cannot_start_gitrun(git_repo: Path) -> None:
    install_git(git_repo, command="/gone/venv/bin/python -m gitrun")
    proc = _status(git_repo, "--git")
    assert proc.returncode == 1, proc.stdout
    assert "cannot start gitrun (status 1: " in proc.stdout
    assert "/gone/venv/bin/python: not found" in proc.stdout
    assert "worker commits are all rejected" in proc.stdout
