"""A loaded definition kept for the next load of the same bytes (gitrun/snapshot.py):
the same objects without pydantic, and a check again whenever anything it
depends on changed, or the kept file is not what was written."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gitrun import snapshot
from gitrun.errors import DefinitionError
from gitrun.runs import load_run
from tests.helpers import commit_all, write_run

RICH_PACKET: dict[str, object] = {
    "rules": {"text": "be brief", "acceptance": ["valid JSON"]},
    "limits": {"concurrency": 3, "max_cost_usd": 5, "timeout": "90s", "halt": "fail=10%"},
    "model": {"default": "m1", "stages": {"review": "m2"}},
    "executor": {
        "kind": "command",
        "command": ["sh", "-c", "echo {task}"],
        "env": {"A_B": "1"},
        "resources": {"num_cpus": 2, "memory": "1GiB", "stages": {"review": {"num_gpus": 1}}},
    },
    "ownership": {"protected": ["docs/"], "strict": True},
    "stages": [{"name": "work"}, {"name": "review", "description": "look again"}],
    "validators": {
        "schema": {"kind": "json_schema", "schema": "schema.json"},
        "big": {"kind": "min_bytes", "min": 3},
        "words": {"kind": "regex", "pattern": "^ok"},
        "cmd": {"kind": "command", "command": ["true"]},
    },
    "outputs": {"validators": ["json"]},
}
RICH_TASKS: list[dict[str, object]] = [
    {"id": "a", "outputs": ["out/a.json"], "inputs": ["in/a.txt"], "note": "first"},
    {
        "id": "b",
        "stage": "review",
        "outputs": [{"path": "out/b.json", "validators": ["schema", "big"]}, "out/b2.json"],
        "owns": ["out/b*"],
    },
    {"id": "c", "outputs": [{"path": "out/c.txt"}], "bundle": "in/c.list"},
]
CONFIG = '[limits]\nmax_attempts = 5\n[executor]\nargs = ["--x"]\n'

# Loads the run in a fresh interpreter: prints its repr, and whether pydantic was imported.
_LOAD = """
import sys
from pathlib import Path
from gitrun.runs import load_run
run = load_run(Path(sys.argv[1]), "r")
print(repr((run.packet, run.tasks, run.keys)))
print("pydantic" in sys.modules)
"""


@pytest.fixture
def repo(git_repo: Path) -> Path:
    (git_repo / ".gitrun").mkdir()
    (git_repo / ".gitrun/config.toml").write_text(CONFIG)
    write_run(git_repo, "r", RICH_TASKS, RICH_PACKET)
    commit_all(git_repo, "define")
    return git_repo


def _load(repo: Path, **env: str) -> tuple[str, bool]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GITRUN_")} | env
    proc = subprocess.run(
        [sys.executable, "-c", _LOAD, str(repo)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    shown, used = proc.stdout.splitlines()
    return shown, used == "True"


def _kept(repo: Path) -> Path:
    return repo / ".git/gitrun/r/definition.json"


def read_kept(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header and the values of a kept definition."""
    head, _, body = path.read_bytes().partition(b"\n")
    return json.loads(head), json.loads(body)


def write_kept(path: Path, header: dict[str, Any], values: dict[str, Any]) -> None:
    """A kept definition with these values, sealed with their digest (as a
    gitrun that made other values would write it)."""
    body = json.dumps(values).encode()
    header = {**header, "sha256": hashlib.sha256(body).hexdigest()}
    path.write_bytes(json.dumps(header).encode() + b"\n" + body)


def test_the_next_load_makes_the_same_objects_without_pydantic(repo: Path) -> None:
    checked, used = _load(repo)
    assert used and _kept(repo).is_file()
    again, used = _load(repo)
    assert not used
    assert again == checked  # reprs: 5.0 stays a float, every table its class
    assert "max_cost_usd=5.0" in again and "JsonSchemaValidator(kind='json_schema'" in again


def test_what_is_kept_holds_only_what_differs_from_the_defaults(repo: Path) -> None:
    load_run(repo, "r", environ={})
    _, kept = read_kept(_kept(repo))
    assert kept["packet"]["limits"] == {
        "concurrency": 3,
        "max_attempts": 5,
        "timeout": 90.0,
        "halt": "fail=10%",
        "max_cost_usd": 5.0,
    }
    assert kept["tasks"][2] == {
        "id": "c",
        "outputs": [{"path": "out/c.txt"}],
        "bundle": "in/c.list",
    }


@pytest.mark.parametrize(
    "edit",
    ["packet", "tasks", "config", "config removed", "override", "another override"],
)
def test_any_change_it_depends_on_checks_again(repo: Path, edit: str) -> None:
    """What the definition depends on changed: checked again (pydantic), and
    the result is what a load without any snapshot gives."""
    env: dict[str, str] = {"GITRUN_CONCURRENCY": "7"} if edit == "another override" else {}
    _load(repo, **env)
    run_dir = repo / ".gitrun/runs/r"
    if edit == "packet":
        text = (run_dir / "packet.toml").read_text()
        (run_dir / "packet.toml").write_text(text.replace("concurrency = 3", "concurrency = 2"))
    elif edit == "tasks":
        text = (run_dir / "tasks.toml").read_text()
        (run_dir / "tasks.toml").write_text(text.replace('"first"', '"second"'))
    elif edit == "config":
        (repo / ".gitrun/config.toml").write_text(CONFIG.replace("5", "6"))
    elif edit == "config removed":
        (repo / ".gitrun/config.toml").unlink()
    else:
        env = {"GITRUN_CONCURRENCY": "9"}
    shown, used = _load(repo, **env)
    assert used, edit
    _kept(repo).unlink()
    assert _load(repo, **env) == (shown, True)
    assert _load(repo, **env) == (shown, False)  # and kept again


def test_an_edit_that_breaks_the_definition_is_the_same_error(repo: Path) -> None:
    load_run(repo, "r")
    tasks = repo / ".gitrun/runs/r/tasks.toml"
    tasks.write_text(tasks.read_text().replace('id = "c"', 'id = "C C"'))
    with pytest.raises(DefinitionError) as failed:
        load_run(repo, "r")
    assert "is not a valid id" in str(failed.value.lines)


@pytest.mark.parametrize(
    "damage",
    [
        "truncated",
        "not json",
        "a task of another shape",
        "a table of another kind",
        "another schema",
        "another run",
        "a list",
        "a symlink",
        "a directory",
        "nested deep",
        "edited by hand",
    ],
)
def test_a_damaged_or_foreign_snapshot_is_checked_again(repo: Path, damage: str) -> None:
    checked, _ = _load(repo)
    kept = _kept(repo)
    header, data = read_kept(kept)
    if damage == "truncated":
        kept.write_bytes(kept.read_bytes()[:-7])
    elif damage == "not json":
        kept.write_text("\x00\xff")
    elif damage == "a task of another shape":
        data["tasks"][0]["colour"] = "red"
        write_kept(kept, header, data)
    elif damage == "a table of another kind":
        data["packet"]["validators"]["big"] = {"kind": "nope", "min": 3}
        write_kept(kept, header, data)
    elif damage == "another schema":
        data["packet"]["limits"]["concurrency"] = 99
        write_kept(kept, {**header, "schema": "0" * 64}, data)
    elif damage == "another run":
        write_kept(kept, {**header, "run": "s"}, data)
    elif damage == "a list":
        kept.write_text("[]")
    elif damage == "a symlink":
        elsewhere = repo.parent / "elsewhere.json"
        elsewhere.write_text(kept.read_text())
        kept.unlink()
        kept.symlink_to(elsewhere)
    elif damage == "a directory":
        kept.unlink()
        kept.mkdir()
    elif damage == "edited by hand":  # the digest no longer holds
        kept.write_bytes(kept.read_bytes().replace(b'"concurrency":3', b'"concurrency":1'))
    else:
        data["packet"]["rules"]["acceptance"] = json.loads("[" * 500 + "]" * 500)
        write_kept(kept, header, data)
        deeper = kept.read_bytes().replace(b"[" * 500, b"[" * 100000)
        kept.write_bytes(deeper.replace(b"]" * 500, b"]" * 100000))  # digest and all
    shown, used = _load(repo)
    assert shown == checked and used, damage
    if damage != "a directory":
        assert _load(repo) == (checked, False), damage  # written again


def test_a_big_table_is_not_kept(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "MAX_TASKS", 2)
    load_run(repo, "r")
    assert not _kept(repo).exists()


def test_a_linked_worktree_keeps_nothing_and_loads(repo: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    subprocess.run(["git", "worktree", "add", "-q", str(tree)], cwd=repo, check=True)
    run = load_run(tree, "r")
    assert [t.id for t in run.tasks] == ["a", "b", "c"]
    assert not (tree / ".git").is_dir() and not (repo / ".git/gitrun/r/definition.json").exists()


def test_a_kept_definition_builds_what_was_dumped(repo: Path) -> None:
    """dump, JSON and builder give back equal objects of the same classes."""
    from gitrun.runs import Task
    from gitrun.settings import Packet

    run = load_run(repo, "r")
    packet = snapshot.builder(Packet)(json.loads(json.dumps(snapshot.dump(run.packet))))
    tasks = [snapshot.builder(Task)(json.loads(json.dumps(snapshot.dump(t)))) for t in run.tasks]
    assert repr(packet) == repr(run.packet) and repr(tasks) == repr(run.tasks)


_PROBE = """
import sys
from gitrun.entry import main
sys.argv = ["gitrun", *sys.argv[1:]]
code = main()
sys.stderr.write(f"pydantic={'pydantic' in sys.modules}\\n")
sys.exit(code)
"""


def _gitrun(repo: Path, *args: str) -> tuple[int, bool]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], cwd=repo, capture_output=True, text=True, timeout=120
    )
    return proc.returncode, proc.stderr.splitlines()[-1] == "pydantic=True"


def test_a_start_after_check_and_every_call_after_it_need_no_pydantic(git_repo: Path) -> None:
    """The lead's day: check, start, status; an orchestrator's: check,
    start, next, collect. status keeps nothing (its view is all it reads)."""
    writes = {"kind": "command", "command": ["sh", "-c", 'echo "{}" > "$GITRUN_OUTPUTS"']}
    command = {"executor": writes, "limits": {"canary": 0}}
    write_run(git_repo, "c", [{"id": "t1", "outputs": ["t1.json"]}], command)
    external = {"executor": {"kind": "external"}, "limits": {"canary": 0}}
    write_run(git_repo, "e", [{"id": "t1", "outputs": ["out/t1.json"]}], external)
    commit_all(git_repo, "define")
    assert _gitrun(git_repo, "status", "c") == (0, False)
    assert not (git_repo / ".git/gitrun/c/definition.json").exists()
    assert _gitrun(git_repo, "check", "c") == (0, True)
    assert _gitrun(git_repo, "start", "c", "-q") == (0, False)
    assert _gitrun(git_repo, "check", "e") == (0, True)
    assert _gitrun(git_repo, "start", "e") == (0, False)
    (git_repo / "out").mkdir(exist_ok=True)
    (git_repo / "out/t1.json").write_text("{}")
    assert _gitrun(git_repo, "collect", "e") == (0, False)
    assert _gitrun(git_repo, "next", "e") == (0, False)


@pytest.mark.parametrize("module", snapshot._SOURCES)
def test_another_source_is_another_fingerprint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    """An edited checkout (a default, a pattern or a rule of loading changed,
    the version not) checks again: the fingerprint hashes the source of what
    a load runs."""
    here = Path(snapshot.__file__).parent
    for name in snapshot._SOURCES:
        (tmp_path / f"{name}.py").write_bytes((here / f"{name}.py").read_bytes())
    monkeypatch.setattr(snapshot, "_fingerprint", None)
    before = snapshot.fingerprint()
    monkeypatch.setattr(snapshot, "__file__", str(tmp_path / "snapshot.py"))
    monkeypatch.setattr(snapshot, "_fingerprint", None)
    assert snapshot.fingerprint() == before  # the same sources, elsewhere
    with (tmp_path / f"{module}.py").open("a") as source:
        source.write("\n# one more line\n")
    monkeypatch.setattr(snapshot, "_fingerprint", None)
    assert snapshot.fingerprint() not in ("", before)
    (tmp_path / f"{module}.py").unlink()  # unreadable: nothing is kept, rather than a guess
    monkeypatch.setattr(snapshot, "_fingerprint", None)
    assert snapshot.fingerprint() == ""
