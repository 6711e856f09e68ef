"""Finding and running the real Claude Code CLI against the mock model.

``.ci/install-clients`` installs the pinned CLI into ``.ci/clients/``; a
``claude`` on PATH is used otherwise. Without either, the tests that need it
skip with the reason.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = ROOT / ".ci" / "clients" / "node_modules" / ".bin" / "claude"
# One claude -p session against the mock takes well under a second; the
# deadline only bounds a client that hangs.
DEADLINE = 60.0


@cache
def _found() -> tuple[str | None, str]:
    """(the claude binary, its version) or (None, why not)."""
    candidates = [str(INSTALLED)] if INSTALLED.exists() else []
    on_path = shutil.which("claude")
    if on_path:
        candidates.append(on_path)
    if not candidates:
        return None, "claude CLI not installed: run .ci/install-clients"
    why = ""
    for binary in candidates:
        try:
            proc = subprocess.run(
                [binary, "--version"], capture_output=True, text=True, timeout=30, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            why = f"{binary} --version failed ({exc})"
            continue
        if proc.returncode == 0 and "Claude Code" in proc.stdout:
            return binary, proc.stdout.split()[0]
        why = f"{binary} --version exited {proc.returncode}: {(proc.stderr or proc.stdout)[:200]}"
    return None, f"claude CLI does not run ({why}): run .ci/install-clients"


def claude_binary() -> str:
    """The claude binary, or skip the test with the reason."""
    binary, why = _found()
    if binary is None:
        pytest.skip(why)
    return binary


def sandbox_or_skip() -> None:
    """Skip unless Claude Code's Bash sandbox can start here (bwrap, socat)."""
    from gitrun.guard.sandbox import missing_sandbox_tools

    missing = missing_sandbox_tools()
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed: Claude Code's sandbox cannot start")


def claude_version() -> str:
    return _found()[1]


def gitrun_bin_dir() -> str:
    """The folder holding this installation's ``gitrun`` script (the venv's bin)."""
    return str(Path(sys.executable).parent)


def short_tmpdir(home: Path) -> str:
    """A scratch folder for one session whose path is short: the client's
    sandbox makes its bridge sockets there, and an AF_UNIX path has at most
    107 bytes, which a pytest-xdist worker's base directory leaves too
    little room for. Removed when the test process ends."""
    if len(str(home)) <= 40:
        return str(home)
    digest = hashlib.sha1(str(home).encode()).hexdigest()[:12]
    short = Path(tempfile.gettempdir()) / f"gitrun-cc-{digest}"
    short.mkdir(exist_ok=True)
    atexit.register(shutil.rmtree, short, True)
    return str(short)


def claude_env(
    home: Path, base_url: str, *, path: str | None = None, **extra: str
) -> dict[str, str]:
    """The environment of one offline session: the mock model, a dummy key, a
    private HOME (no user settings, sessions kept apart), no traffic but the
    model's, and this gitrun first on PATH (the hooks call ``gitrun``)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith("GIT_") or k in ("LANG", "LC_ALL", "USER", "LOGNAME")
    }
    from tests.realclient.clis import gitrun_source

    env.update(
        {
            "PYTHONPATH": gitrun_source(),
            "HOME": str(home),
            "TMPDIR": short_tmpdir(home),  # the client's scratch files stay with the test
            "PATH": path
            if path is not None
            else os.pathsep.join([gitrun_bin_dir(), os.environ.get("PATH", "/usr/bin:/bin")]),
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_API_KEY": "sk-ant-mock-not-a-key",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
        }
    )
    env.update(extra)
    return env


def run_claude(
    repo: Path, prompt: str, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    """``claude -p PROMPT`` in ``repo``, edits accepted, bounded in time."""
    return subprocess.run(
        [
            claude_binary(),
            "-p",
            prompt,
            "--permission-mode",
            "acceptEdits",
            "--output-format",
            "json",
            *args,
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def gitrun_beside_claude(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``gitrun ARGS`` in ``repo`` with this gitrun and the claude CLI first
    on PATH (``gitrun plugin`` runs ``claude plugin``), ``env`` on top."""
    from tests.helpers import run_gitrun

    path = [gitrun_bin_dir(), str(Path(claude_binary()).parent), os.environ["PATH"]]
    return run_gitrun(repo, *args, env={"PATH": os.pathsep.join(path), **env})
