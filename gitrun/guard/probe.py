"""Whether the installed hooks would run and block: ``gitrun hooks status``.

Reading the settings proves nothing: a hook whose interpreter is gone (exit
127) lets every write through, and Claude Code blocks only on exit 2. So
each installed gitrun hook is run exactly as its client runs it (Claude
Code: ``/bin/sh -c COMMAND`` with the tool call as JSON on stdin; git: the
hook file) on sample inputs against a sample run in a throwaway repository:

- an owned write of a task must be allowed (the hook starts and decides);
- a write outside the task's owns must be denied;
- a task context it cannot identify must block (exit 2);
- with nothing runnable on PATH, it must still block (exit 2).

The git pre-commit hook must reject a worker's commit it cannot check.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from gitrun.definition.load import RUNS_DIR
from gitrun.errors import GitrunError
from gitrun.guard.install import (
    CHAINED,
    LOCAL_SETTINGS,
    MARKER,
    PLUGIN_CALL,
    SETTINGS,
    claude_hooks,
    gitrun_sandbox_place,
    hooks_dir,
    is_ours,
    read_settings,
    stale_sandbox,
)
from gitrun.guard.plugin import enabled_by
from gitrun.processes.proc import clean_env, run_cmd

SETTINGS_FILES = (SETTINGS, LOCAL_SETTINGS)
PROBE_RUN = "hook-probe"
PROBE_TASK = "t1"
PROBE_OUTPUT = "out/owned.json"
HOOK_DEADLINE = 60.0  # seconds one probe may take; a hook that hangs fails the check


@dataclass(frozen=True)
class HookStatus:
    where: str  # ".claude/settings.json PreToolUse", ".git/hooks/pre-commit"
    ok: bool
    says: str  # one sentence


@dataclass(frozen=True)
class _Ran:
    code: int
    stdout: str
    stderr: str

    @property
    def verdict(self) -> str:
        """allow, deny or block as Claude Code reads a PreToolUse hook, or
        "ignored" for a failure that lets the call through."""
        if self.code == 2:
            return "block"
        if self.code != 0:
            return "ignored"
        try:
            out = json.loads(self.stdout) if self.stdout.strip() else {}
            decision = out["hookSpecificOutput"]["permissionDecision"] if out else "allow"
        except (ValueError, KeyError, TypeError):
            return "allow"
        return "deny" if decision == "deny" else "allow"

    def why(self) -> str:
        said = (self.stderr or self.stdout).strip().splitlines()
        return f"status {self.code}" + (f": {said[0].strip()[:200]}" if said else "")


def _run(
    argv: list[str], cwd: Path, stdin: str, env: dict[str, str], deadline: float = HOOK_DEADLINE
) -> _Ran:
    """Run a hook in its own process group; at the deadline the whole group
    is killed (a hook is a shell and its children)."""
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        return _Ran(127, "", str(exc))
    try:
        out, err = proc.communicate(stdin.encode(), timeout=deadline)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return _Ran(-1, "", f"still running after {deadline:.0f} s")
    return _Ran(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))


def _base_env() -> dict[str, str]:
    return {k: v for k, v in clean_env().items() if not k.startswith("GITRUN_")}


def _sample_repo(root: Path) -> Path:
    """A repository holding one run whose task t1 owns ``out/owned.json``."""
    repo = root / "sample"
    run_dir = repo / RUNS_DIR / PROBE_RUN
    run_dir.mkdir(parents=True)
    run_cmd(["git", "init", "-q", str(repo)], env=_base_env())
    packet = {
        "run": {"id": PROBE_RUN},
        "model": {"default": "sample"},
        "executor": {"kind": "external"},
    }
    (run_dir / "packet.toml").write_text(tomli_w.dumps(packet))
    task = {"id": PROBE_TASK, "outputs": [PROBE_OUTPUT]}
    (run_dir / "tasks.toml").write_text(tomli_w.dumps({"task": [task]}))
    return repo


def _write_call(sample: Path, path: str) -> str:
    return json.dumps(
        {
            "session_id": "gitrun-hook-probe",
            "transcript_path": str(sample / "probe.jsonl"),
            "cwd": str(sample),
            "hook_event_name": "PreToolUse",
            "tool_name": "Write",
            "tool_input": {"file_path": str(sample / path), "content": "{}"},
            "tool_use_id": "toolu_gitrun_probe",
        },
        allow_nan=False,
    )


def _claude_commands(repo: Path) -> list[tuple[str, str]]:
    """(where, command) of gitrun's PreToolUse write hooks: the plugin's
    where a settings file enables it, and those in the settings files."""
    found: list[tuple[str, str]] = []
    enabling = enabled_by(repo)
    if enabling is not None:
        command = claude_hooks(PLUGIN_CALL)["PreToolUse"][0]["hooks"][0]["command"]
        found.append((f"the gitrun plugin (enabled in {enabling}) PreToolUse", command))
    for name in SETTINGS_FILES:
        path = repo / name
        if not path.exists():
            continue
        settings = read_settings(path)
        hooks = settings.get("hooks")
        entries: Any = hooks.get("PreToolUse") if isinstance(hooks, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            if not is_ours(entry):
                continue
            for hook in entry["hooks"]:
                command = hook.get("command") if isinstance(hook, dict) else None
                if isinstance(command, str) and " hook pre-write" in command:
                    found.append((f"{name} PreToolUse", command))
    return found


def check_claude_hook(repo: Path, command: str, sample: Path, scratch: Path) -> tuple[bool, str]:
    """Run one write-hook command the way Claude Code does; (ok, sentence)."""
    env = _base_env()
    task = {**env, "GITRUN_RUN": PROBE_RUN, "GITRUN_TASK": PROBE_TASK}
    argv = ["/bin/sh", "-c", command]
    owned = _run(argv, repo, _write_call(sample, PROBE_OUTPUT), task)
    if owned.verdict == "ignored":
        return False, (
            f"does not run, and Claude Code lets every write through ({owned.why()}); make "
            "gitrun runnable here and run `gitrun hooks install` again"
        )
    if owned.verdict != "allow":
        return False, (
            f"{'blocks' if owned.verdict == 'block' else 'denies'} even a write the task owns "
            f"({owned.why()}); make gitrun runnable here and run `gitrun hooks install` again"
        )
    stray = _run(argv, repo, _write_call(sample, "elsewhere.txt"), task)
    if stray.verdict not in ("deny", "block"):
        return False, f"lets a write outside the task's owns through ({stray.why()})"
    unknown = {**env, "GITRUN_RUN": PROBE_RUN}
    lost = _run(argv, repo, _write_call(sample, PROBE_OUTPUT), unknown)
    if lost.verdict != "block":
        return False, (
            f"does not block a task it cannot identify ({lost.why()}); run "
            "`gitrun hooks install` with this gitrun"
        )
    # Neither a command on PATH nor any Python can start: what a clone
    # without gitrun, or a venv that was rebuilt or moved, looks like.
    empty = scratch / "empty-path"
    empty.mkdir(exist_ok=True)
    broken = {**task, "PATH": str(empty), "PYTHONHOME": str(empty)}
    cannot_start = _run(argv, repo, _write_call(sample, PROBE_OUTPUT), broken)
    if cannot_start.verdict != "block":
        return False, (
            f"does not fail closed: when it cannot start, Claude Code lets the write through "
            f"({cannot_start.why()}); run `gitrun hooks install` again to update it"
        )
    return True, (
        "runs: allows an owned write, denies one outside the task's owns, and blocks when it "
        "cannot identify the task or cannot start"
    )


def check_git_hook(repo: Path, sample: Path) -> HookStatus:
    try:
        hooks = hooks_dir(repo, force=True)
    except Exception as exc:  # a broken repository or config: say so, do not crash
        return HookStatus("git pre-commit", False, f"cannot find the hooks folder ({exc})")
    target = hooks / "pre-commit"
    where = str(target.relative_to(repo)) if target.is_relative_to(repo) else str(target)
    if not target.exists() or MARKER not in target.read_text(errors="replace"):
        return HookStatus(where, False, "not installed; run `gitrun hooks install --git`")
    if not os.access(target, os.X_OK):
        return HookStatus(where, False, "is not executable, so git skips it; run `chmod +x` on it")
    env = {**_base_env(), "GITRUN_RUN": PROBE_RUN, "GITRUN_TASK": "no-such-task"}
    ran = _run([str(target)], sample, "", env)
    if ran.code == 0:
        return HookStatus(where, False, "accepts a worker's commit it cannot check")
    if "commit rejected" not in ran.stderr:
        return HookStatus(
            where, False, f"cannot start gitrun ({ran.why()}); worker commits are all rejected"
        )
    chained = " (then runs the hook it replaced)" if (hooks / CHAINED).exists() else ""
    return HookStatus(where, True, f"runs: rejects a worker's commit it cannot check{chained}")


def sandbox_status(repo: Path) -> HookStatus | None:
    """Whether gitrun's Bash sandbox keeps this clone read-only; None without
    one (``--no-sandbox``, or no bubblewrap). It names an absolute path, so a
    clone moved or copied elsewhere keeps a sandbox that guards the old place."""
    try:
        stale = stale_sandbox(repo)
        block = read_settings(repo / LOCAL_SETTINGS, LOCAL_SETTINGS).get("sandbox")
    except GitrunError as exc:
        return HookStatus(LOCAL_SETTINGS, False, exc.message)
    if stale is not None:
        return HookStatus(LOCAL_SETTINGS, False, stale)
    if gitrun_sandbox_place(block) is None:
        return None
    return HookStatus(LOCAL_SETTINGS, True, "Bash runs in the sandbox with this clone read-only")


def hook_statuses(repo: Path, claude: bool = True, git_hook: bool = True) -> list[HookStatus]:
    """The state of each installed hook, found by running it."""
    statuses: list[HookStatus] = []
    with tempfile.TemporaryDirectory(prefix="gitrun-hook-probe-") as tmp:
        scratch = Path(tmp)
        sample = _sample_repo(scratch)
        if claude:
            commands = _claude_commands(repo)
            if not commands:
                statuses.append(
                    HookStatus(
                        SETTINGS,
                        False,
                        "no gitrun write hook; run `gitrun plugin install` (or `gitrun hooks "
                        "install --claude` for hooks in the repository)",
                    )
                )
            for where, command in commands:
                ok, says = check_claude_hook(repo, command, sample, scratch)
                statuses.append(HookStatus(where, ok, says))
            sandbox = sandbox_status(repo)
            if sandbox is not None:
                statuses.append(sandbox)
        if git_hook:
            statuses.append(check_git_hook(repo, sample))
    return statuses
