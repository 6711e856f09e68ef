"""The one door to child processes that gitrun waits for.

Long-running workers are started by the scheduler; everything short (git,
validators) goes through :func:`run_cmd`, whose error names the command,
its status and its last line of output.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from gitrun.errors import CommandError, GitUnavailable


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child, without the GIT_* variables a git hook exports.

    Code that runs inside a git hook would otherwise talk to the hook's index
    and work tree instead of the repository it names.
    """
    env = {k: v for k, v in os.environ.items() if not is_hook_git_var(k)}
    if extra:
        env.update(extra)
    return env


def is_hook_git_var(name: str) -> bool:
    return name in {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_PREFIX",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_COMMON_DIR",
    }


def run_cmd(
    argv: Sequence[str],
    cwd: Path | str | None = None,
    *,
    input: bytes | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` to completion and capture its output.

    With ``check`` a non-zero status raises :class:`CommandError`.
    """
    try:
        proc = subprocess.run(
            list(argv),
            cwd=cwd,
            input=input,
            env=dict(env) if env is not None else clean_env(),
            capture_output=True,
            check=False,
        )
    except FileNotFoundError as exc:
        if argv[0] == "git" and exc.filename == "git":  # not a missing cwd
            raise GitUnavailable.missing() from exc
        raise CommandError(argv, 127, f"{argv[0]}: command not found") from exc
    if proc.returncode == 128 and argv[0] == "git":  # even where the caller copes with failure
        refusal = GitUnavailable.refusal(proc.stderr.decode(errors="replace"))
        if refusal is not None:
            raise refusal
    if check and proc.returncode != 0:
        output = (proc.stderr or proc.stdout).decode(errors="replace")
        raise CommandError(argv, proc.returncode, output)
    return proc
