"""Finding the real codex, gemini and aider CLIs and running gitrun over them offline.

``.ci/install-clients`` installs the pinned versions into ``.ci/clients/``
(codex and gemini from the npm registry, aider from PyPI into its own
virtual environment there); a client on PATH is used otherwise. Without
one, the tests that need it skip with the reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ROOT / ".ci" / "clients"
INSTALLED = {
    "codex": CLIENTS / "node_modules" / ".bin" / "codex",
    "gemini": CLIENTS / "node_modules" / ".bin" / "gemini",
    "aider": CLIENTS / "aider" / "bin" / "aider",
}
# What `<client> --version` prints, and the version in it.
VERSION = {
    "codex": re.compile(r"^codex-cli (\S+)"),
    "gemini": re.compile(r"^(\d+\.\d+\.\S+)"),
    "aider": re.compile(r"^aider (\S+)"),
}
# One gitrun run of one task over a client against its mock: a few seconds;
# the deadline bounds a client that hangs.
DEADLINE = 120.0


@cache
def _found(name: str) -> tuple[str | None, str]:
    """(the client's binary, its version) or (None, why not)."""
    candidates = [str(INSTALLED[name])] if INSTALLED[name].exists() else []
    on_path = shutil.which(name)
    if on_path:
        candidates.append(on_path)
    if not candidates:
        return None, f"{name} CLI not installed: run .ci/install-clients"
    why = ""
    for binary in candidates:
        try:
            proc = subprocess.run(
                [binary, "--version"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "HOME": str(CLIENTS), "NO_COLOR": "1"},
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            why = f"{binary} --version failed ({exc})"
            continue
        found = VERSION[name].search(proc.stdout.strip())
        if proc.returncode == 0 and found:
            return binary, found[1]
        why = f"{binary} --version exited {proc.returncode}: {(proc.stderr or proc.stdout)[:200]}"
    return None, f"{name} CLI does not run ({why}): run .ci/install-clients"


def client_binary(name: str) -> str:
    """The client's binary, or skip the test with the reason."""
    binary, why = _found(name)
    if binary is None:
        pytest.skip(why)
    return binary


def client_version(name: str) -> str:
    return _found(name)[1]


def private_bin(tmp_path: Path, name: str) -> Path:
    """A folder holding only ``name`` (a link to the real client), for PATH."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    link = folder / name
    if not link.exists():
        link.symlink_to(os.path.abspath(client_binary(name)))
    return folder


def gitrun_source() -> str:
    """The folder the gitrun under test is imported from: a gitrun run as a
    child process (and the hooks it installs) runs this code, not whatever
    copy the interpreter's site-packages points at."""
    import gitrun

    return str(Path(gitrun.__file__).resolve().parents[1])


def offline_env(home: Path, bin_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a gitrun run over a client with no network: a
    private HOME and TMPDIR, the client first on PATH, git's test settings
    and gitrun's (GIT_*, GITRUN_*) kept, nothing else of the caller's."""
    home.mkdir(parents=True, exist_ok=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(("GIT_", "GITRUN_")) or k in ("LANG", "LC_ALL", "USER", "LOGNAME")
    }
    env.update(
        {
            "PYTHONPATH": gitrun_source(),
            "HOME": str(home),
            "TMPDIR": str(home),
            "PATH": os.pathsep.join([str(bin_dir), "/usr/local/bin", "/usr/bin", "/bin"]),
            "NO_COLOR": "1",
        }
    )
    env.update(extra)
    return env


def gitrun(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``gitrun ARGS`` as a real process in ``repo``, bounded in time
    (forked from the suite's server: tests/forkserver.py)."""
    from tests.forkserver import run_gitrun_call

    return run_gitrun_call(list(args), repo, env=env, timeout=DEADLINE)


def codex_env(tmp_path: Path, base_url: str, config: str = "") -> dict[str, str]:
    """The environment of codex against a mock Responses API at ``base_url``,
    in a private ``CODEX_HOME`` whose config.toml selects it (``config``
    follows the provider's table, so a bare key there is the provider's)."""
    codex_home = tmp_path / "home" / ".codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(
        'model_provider = "mock"\n\n'
        "[model_providers.mock]\n"
        'name = "mock"\n'
        f'base_url = "{base_url}"\n'
        'wire_api = "responses"\n'
        'env_key = "OPENAI_API_KEY"\n' + config
    )
    # codex refuses to set up its sandbox helper under TMPDIR, so the two differ.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    return offline_env(
        tmp_path / "home",
        private_bin(tmp_path, "codex"),
        CODEX_HOME=str(codex_home),
        OPENAI_API_KEY="sk-mock-not-a-key",
        TMPDIR=str(scratch),
    )
