"""Real temporary git repositories and file trees for the tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

import tomli_w

AUTHOR = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.com",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.com",
}


def git_env(home: Path) -> dict[str, str]:
    """The environment for git in tests: pinned author, no user or system config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(AUTHOR)
    config = home / "gitconfig"
    if not config.exists():
        config.write_text("[init]\n\tdefaultBranch = main\n[commit]\n\tgpgsign = false\n")
    env["GIT_CONFIG_GLOBAL"] = str(config)
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    return env


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    )
    return out.stdout


def build_tree(root: Path, files: Mapping[str, str | bytes]) -> None:
    """Write ``{relative path: content}`` under ``root``."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def commit_all(repo: Path, message: str = "commit") -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


def write_run(
    repo: Path,
    run_id: str,
    tasks: list[dict[str, object]],
    packet: Mapping[str, object] | None = None,
) -> Path:
    """Write a run definition from Python data; returns its directory."""
    run_dir = repo / ".gitrun" / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    data: dict[str, object] = {
        "run": {"id": run_id},
        "model": {"default": "test-model"},
        "executor": {"kind": "command", "command": ["true", "{pointer}"]},
    }
    data.update(packet or {})
    (run_dir / "packet.toml").write_text(tomli_w.dumps(data))
    (run_dir / "tasks.toml").write_text(tomli_w.dumps({"task": tasks}))
    return run_dir
