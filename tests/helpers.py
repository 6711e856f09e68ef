"""Real temporary git repositories and file trees for the tests."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

import tomli_w

from tests.forkserver import run_gitrun_call

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


def user_env() -> dict[str, str]:
    """This process's environment as a user's shell has it: no gitrun
    variable (a worker's would make a child gitrun act as that worker),
    except the load bound the suite gives every child (``_quiet_machine`` in
    conftest), so a child gitrun is never held back by the machine's load."""
    return {
        k: v for k, v in os.environ.items() if not k.startswith("GITRUN_") or k == "GITRUN_MAX_LOAD"
    }


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({out.returncode}): {out.stderr}")
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


# One attempt's identity, as a worker's environment carries it (the reaper and
# signal tests start processes as if an attempt had).
ATTEMPT_ID = uuid.uuid4().hex
ATTEMPT_ENV = {
    "GITRUN_RUN": "r",
    "GITRUN_TASK": "t1",
    "GITRUN_ATTEMPT": "1",
    "GITRUN_ATTEMPT_ID": ATTEMPT_ID,
}
FAKE_WORKER = Path(__file__).resolve().parent / "fake_worker.py"


def fake_worker_run(
    repo: Path,
    run_id: str,
    count: int,
    spec: dict[str, object],
    packet: Mapping[str, object] | None = None,
    isolation: str = "auto",
) -> Path:
    """A run of ``count`` tasks (t01, t02, ...) whose worker is the fake agent
    (confined as ``isolation`` says).

    Each task owns out/<id>.json. Returns the spec file's path.
    """
    import json
    import sys

    spec_path = repo.parent / f"{run_id}-spec.json"
    spec_path.write_text(json.dumps(spec))
    width = max(2, len(str(count)))
    tasks: list[dict[str, object]] = [
        {"id": f"t{i:0{width}d}", "outputs": [f"out/t{i:0{width}d}.json"]}
        for i in range(1, count + 1)
    ]
    data: dict[str, object] = {
        "executor": {
            "command": [sys.executable, str(FAKE_WORKER), str(spec_path)],
            "isolation": isolation,
        },
        "limits": {"timeout": "60s"},
    }
    data.update(packet or {})
    write_run(repo, run_id, tasks, data)
    return spec_path


def spawn_events(spec_path: Path) -> list[tuple[str, int, str, float]]:
    """(task, attempt, event, time) lines the fake workers logged."""
    import json

    log = json.loads(spec_path.read_text()).get("spawn_log")
    if not log or not Path(log).exists():
        return []
    events = []
    for line in Path(log).read_text().splitlines():
        task, attempt, event, at = line.split()
        events.append((task, int(attempt), event, float(at)))
    return events


def run_gitrun(
    repo: Path, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """gitrun as a real child process in ``repo``, as a user's shell runs it
    (:func:`user_env`, with ``env`` on top), run to its end, output captured
    (forked from a server that imported gitrun once: tests/forkserver.py)."""
    return run_gitrun_call(list(args), repo, {**user_env(), **(env or {})})


def gitrun_ok(repo: Path, *args: str) -> str:
    """What :func:`run_gitrun` printed (stdout, then stderr), once it exited 0."""
    proc = run_gitrun(repo, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def ran_since(log: Path) -> list[str]:
    """The tasks a worker that appends its task to ``log`` ran since the last call."""
    if not log.exists():
        return []
    ran = sorted(log.read_text().split())
    log.unlink()
    return ran


def gitrun_process(repo: Path, *args: str, capture: bool = True) -> subprocess.Popen[str]:
    """gitrun as a real child process in ``repo``. With ``capture`` its output
    is piped for the test to read; a test that never reads it passes False
    (a full pipe would stall the child)."""
    import sys

    where = subprocess.PIPE if capture else subprocess.DEVNULL
    return subprocess.Popen(
        [sys.executable, "-m", "gitrun", *args], cwd=repo, stdout=where, stderr=where, text=True
    )


def wait_for(
    condition: Callable[[], object], timeout: float = 30.0, what: str = "the condition"
) -> None:
    """Poll ``condition()`` until it is true, for ``timeout`` seconds at most;
    past that, fail the test naming ``what`` never happened.

    The suite's one bounded wait: a test waits on the thing it stands for,
    never for a fixed time.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"never happened within {timeout:g} s: {what}")
        time.sleep(0.02)


def wait_until(
    driver: subprocess.Popen[str] | subprocess.Popen[bytes],
    ready: Callable[[], object],
    timeout: float = 60.0,
    what: str = "it got there",
) -> None:
    """Wait until ``ready()`` while ``driver`` still runs, for ``timeout``
    seconds at most; fail the test at once when ``driver`` ends first."""

    def settled() -> bool:
        if ready():
            return True
        if driver.poll() is not None:
            raise AssertionError(f"the driver ended (exit {driver.returncode}) before: {what}")
        return False

    wait_for(settled, timeout, what)


def ledger_records(repo: Path, run_id: str = "r") -> list[dict[str, object]]:
    """The run's ledger on disk, every record in order (through gitrun's one reader)."""
    from gitrun.store.ledger import read_ledger

    return read_ledger(repo / ".gitrun/runs" / run_id)


def committed_ledger(
    repo: Path, rev: str = "gitrun/r", run_id: str = "r"
) -> list[dict[str, object]]:
    """The ledger records committed at ``rev``, in order: the chunks by number
    ([] when ``rev`` does not exist)."""
    from gitrun.store.jsonlines import parse_lines
    from gitrun.store.ledger import chunk_number, is_ledger_name

    run_dir = f".gitrun/runs/{run_id}"
    proc = subprocess.run(
        ["git", "-C", str(repo), "ls-tree", "-r", "--name-only", rev, "--", run_dir],
        capture_output=True,
        text=True,
    )
    names = [p[len(run_dir) + 1 :] for p in proc.stdout.split()]
    names = sorted((n for n in names if is_ledger_name(n)), key=chunk_number)
    records: list[dict[str, object]] = []
    for name in names:
        text = git(repo, "show", f"{rev}:{run_dir}/{name}")
        records += parse_lines(text)  # a line a crash cut short is skipped
    return records


def one_task_run(repo: Path) -> None:
    """Run "r": one task whose shell worker writes its JSON output; committed."""
    write_run(
        repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {"executor": {"command": ["sh", "-c", 'echo "{}" > "$GITRUN_OUTPUTS"']}},
    )
    commit_all(repo, "define r")


def fake_programs(folder: Path, *names: str) -> Path:
    """Stand-ins for programs a run's executor starts (agent CLIs, ``srun``)
    where only ``gitrun check`` looks at them: each answers ``--version``
    (``NAME 0.0.0-test``), as check asks a preset's CLI, and fails anything
    else. Returns ``folder``, for the front of PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = folder / name
        path.write_text(
            "#!/bin/sh\n"
            f'[ "$1" = --version ] && {{ echo "{name} 0.0.0-test"; exit 0; }}\n'
            f'echo "{name}: a stand-in for check only" >&2\nexit 1\n'
        )
        path.chmod(0o755)
    return folder
