"""Local state files that are not regular files never hang gitrun or crash it.

A FIFO where ``leases.json`` or ``running.jsonl`` belongs made every command
that opened it wait for a writer that never came (a cron ``watchdog`` hung
for good); a FIFO where the hook's rules belong hung the write hook until the
client killed it, and a killed hook lets the write through. A directory or a
link to ``/dev/zero`` in their place (or in place of the run's locks and the
committer's index) gave exit 70. Every case here is a real
FIFO, directory or device link in a real repository, run through the real
command with a deadline: it must end, with a sentence that names the file
(or with the command's own result, when the file is one it can do without),
never a traceback and never exit 70, and the hook must deny.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from gitrun.store.local import LocalPaths
from tests.forkserver import run_gitrun_call
from tests.helpers import commit_all, run_gitrun, write_run

DEADLINE = 60  # seconds; a hang is what is tested, so every call has one

Make = Callable[[Path], None]


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _directory(path: Path) -> None:
    path.mkdir()
    (path / "inside").write_text("x")


def _device(path: Path) -> None:
    path.symlink_to("/dev/zero")


KINDS: dict[str, Make] = {"fifo": _fifo, "directory": _directory, "device": _device}


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GITRUN_")}


def _gitrun(
    repo: Path, *args: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    try:
        return run_gitrun_call(
            list(args), repo, env={**_env(), **(env or {})}, stdin=stdin, timeout=DEADLINE
        )
    except subprocess.TimeoutExpired as exc:  # pragma: no cover - the failure tested for
        raise AssertionError(f"gitrun {' '.join(args)} hung (no end in {DEADLINE} s)") from exc


def _replace(path: Path, kind: str) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    KINDS[kind](path)


def _assert_clean_end(proc: subprocess.CompletedProcess[str], name: str) -> None:
    said = proc.stdout + proc.stderr
    assert proc.returncode != 70, said
    assert "Traceback" not in said and "internal error" not in said, said
    if proc.returncode not in (0, 3):
        assert name in said, said  # the sentence names the file (watchdog reports on stdout)


@pytest.fixture
def external(git_repo: Path) -> Path:
    """An external run "e" that has handed out its first batch."""
    tasks = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, 5)]
    write_run(
        git_repo, "e", tasks, {"executor": {"kind": "external"}, "limits": {"concurrency": 2}}
    )
    commit_all(git_repo, "define e")
    started = _gitrun(git_repo, "start", "e", "--json")
    assert started.returncode == 0, started.stderr
    return git_repo


STATE = ["leases.json", "audit.json", "running.jsonl", "governor.json", "driver.json"]
COMMANDS = [
    ("status", "e"),
    ("next", "e"),
    ("collect", "e"),
    ("resume", "e"),
    ("watchdog",),
]


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("name", STATE)
def test_state_file_of_another_kind_ends_every_command(
    external: Path, name: str, kind: str
) -> None:
    local = LocalPaths.of(external, "e")
    path = local.root / name if name != "audit.json" else local.audit
    for command in COMMANDS:
        _replace(path, kind)  # a command may have put a good file back; put the bad one again
        proc = _gitrun(external, *command)
        _assert_clean_end(proc, name)


def _hook(repo: Path, path: str) -> subprocess.CompletedProcess[str]:
    payload = json.dumps(
        {"cwd": str(repo), "tool_name": "Write", "tool_input": {"file_path": str(repo / path)}}
    )
    env = {"GITRUN_RUN": "e", "GITRUN_TASK": "t1"}
    return _gitrun(repo, "hook", "pre-write", stdin=payload, env=env)


def _denied(proc: subprocess.CompletedProcess[str]) -> bool:
    """Exit 2, or the client's "deny" decision on stdout."""
    if proc.returncode == 2:
        return True
    if proc.returncode != 0 or not proc.stdout.strip():
        return False
    decision = json.loads(proc.stdout)["hookSpecificOutput"]["permissionDecision"]
    return bool(decision == "deny")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_hook_rules_of_another_kind_never_let_a_write_through(external: Path, kind: str) -> None:
    """The rules are a cache the hook writes again when it cannot use it: a
    FIFO or a link in its place is replaced and the write judged; a directory
    is not removed, and the hook denies, naming it. Either way at once."""
    rules = LocalPaths.of(external, "e").hook_rules
    _replace(rules, kind)
    stray = _hook(external, "out/t2.json")  # t2's output: never t1's to write
    assert _denied(stray), (stray.returncode, stray.stdout, stray.stderr)
    _replace(rules, kind)
    owned = _hook(external, "out/t1.json")
    if kind == "directory":
        assert owned.returncode == 2 and "hook-rules.jsonl" in owned.stderr, owned.stderr
        assert (rules / "inside").exists()
    else:
        assert owned.returncode == 0 and not _denied(owned), owned.stdout + owned.stderr
        assert rules.is_file() and not rules.is_symlink()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_driver_survives_its_state_file_of_another_kind(git_repo: Path, kind: str) -> None:
    """A command run: the journal or the owner record the driver writes is in
    the way from the start; the run says which file and ends, and once the
    file is moved aside, resume finishes the run."""
    for name in ("running.jsonl", "driver.json"):
        run = name.split(".")[0]
        write_run(
            git_repo,
            run,
            [{"id": "t1", "outputs": [f"out/{run}.json"]}],
            {"executor": {"command": ["sh", "-c", 'echo "{}" > "$GITRUN_OUTPUTS"']}},
        )
        commit_all(git_repo, f"define {run}")
        path = LocalPaths.of(git_repo, run).root / name
        _replace(path, kind)
        _assert_clean_end(_gitrun(git_repo, "start", run), name)
        _replace(path, kind)
        _assert_clean_end(_gitrun(git_repo, "resume", run), name)
        if kind == "directory":
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
        verify = ["git", "-C", str(git_repo), "rev-parse", "-q", "--verify", f"gitrun/{run}"]
        started = subprocess.run(verify, capture_output=True).returncode
        done = _gitrun(git_repo, "resume" if started == 0 else "start", run)
        assert done.returncode == 0, done.stdout + done.stderr


# The committer's private index and lock, and the driver's lock: files gitrun
# makes and takes, not records it reads, so the readers' refusal missed them
# and a directory or a device link there gave exit 70 with a traceback. One
# row per case: the file, what is in its place, the command, and its answer
# (1: the sentence naming the file; 0: a file the command does without, or
# one gitrun removes and makes again, as the private index).
LOCKS = [
    ("index", "directory", "collect", 1),
    ("index", "device", "collect", 0),
    ("index", "directory", "status", 0),
    ("commit.lock", "directory", "collect", 1),
    ("commit.lock", "device", "collect", 1),
    ("commit.lock", "fifo", "collect", 1),
    ("commit.lock", "directory", "status", 0),
    ("driver.lock", "directory", "collect", 1),
    ("driver.lock", "device", "collect", 1),
    ("driver.lock", "fifo", "collect", 1),
    ("driver.lock", "directory", "status", 1),
    ("driver.lock", "device", "status", 1),
    ("driver.lock", "fifo", "status", 1),
]


@pytest.mark.parametrize(("name", "kind", "command", "code"), LOCKS)
def test_a_lock_or_index_of_another_kind_is_named_with_exit_1(
    external: Path, name: str, kind: str, command: str, code: int
) -> None:
    (external / "out").mkdir(exist_ok=True)
    (external / "out/t1.json").write_text('{"ok": 1}')  # collect has a commit to make
    path = LocalPaths.of(external, "e").root / name
    _replace(path, kind)
    proc = run_gitrun(external, command, "e")
    said = proc.stdout + proc.stderr
    assert proc.returncode == code, (proc.returncode, said)
    assert "Traceback" not in said and "internal error" not in said, said
    if code:
        assert proc.stdout == "", said
        assert proc.stderr == (
            f"gitrun: error: .git/gitrun/e/{name}: is {_NOUNS[kind]}, where gitrun keeps a "
            "regular file; move it aside and run the command again\n"
        )
    if kind == "directory":
        assert (path / "inside").exists()  # said, never removed


_NOUNS = {"directory": "a directory", "device": "a device", "fifo": "a FIFO"}


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_sandbox_folder_of_another_kind_never_holds_a_driver(git_repo: Path, kind: str) -> None:
    """The folder of a run's attempts is emptied as a driver starts: a FIFO
    (or a link) in its place is removed, not opened, and the run goes on."""
    script = 'printf \'{"task": "%s"}\\n\' "$GITRUN_TASK" > "out/$GITRUN_TASK.json"'
    tasks = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in (1, 2)]
    packet = {"executor": {"preset": "shell", "shell": script}, "limits": {"canary": 0}}
    write_run(git_repo, "r", tasks, packet)
    commit_all(git_repo, "define r")
    (git_repo / "out").mkdir()
    _replace(LocalPaths.of(git_repo, "r").sandboxes, kind)
    proc = _gitrun(git_repo, "start", "r")
    _assert_clean_end(proc, "sandbox")
    assert proc.returncode == 0, proc.stdout + proc.stderr
