"""Each fact of a run definition is declared once, and a checked definition
has one cached form.

The schema is the one place a field, its default, its bounds and its
``GITRUN_*`` override are written: a second declaration (a mirror of the
limits, a table of the overrides, a guess of the defaults) is how two
readers of the same definition come to disagree. The hook rules are the one
file derived from a definition; nothing else under ``.git/gitrun/`` holds it.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from gitrun.definition.layers import env_overrides
from gitrun.definition.messages import fields_of, unwrap
from gitrun.definition.schema import Limits, Packet
from tests.forkserver import run_gitrun_call
from tests.helpers import commit_all, run_gitrun, write_run

PACKAGE = Path(__file__).resolve().parents[2] / "gitrun"
SCHEMA = PACKAGE / "definition/schema.py"


def _modules() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(encoding="utf-8")) for path in PACKAGE.rglob("*.py")}


def _strings(node: ast.AST) -> list[str]:
    return [
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def test_every_override_is_a_marker_on_its_field() -> None:
    overrides = env_overrides()
    assert set(overrides) == {
        "GITRUN_MODEL",
        "GITRUN_CONCURRENCY",
        "GITRUN_CANARY",
        "GITRUN_MAX_ATTEMPTS",
        "GITRUN_MAX_SPAWNS",
        "GITRUN_TIMEOUT",
        "GITRUN_MAX_LOAD",
        "GITRUN_PAYLOAD_BUDGET",
        "GITRUN_HALT",
        "GITRUN_MAX_COST_USD",
        "GITRUN_MAX_TOKENS",
    }
    for table, key, _read in overrides.values():
        section = unwrap(fields_of(Packet)[table])
        assert key in section.model_fields, (table, key)


def test_no_module_names_an_override_but_the_schema() -> None:
    """A variable's name as a whole string appears once in the package: in
    its field's marker. (Sentences that mention it are not declarations.)"""
    names = set(env_overrides())
    found: dict[str, list[str]] = {name: [] for name in names}
    for path, tree in _modules().items():
        if path.name == "simagent.py":  # a worker: it reads the GITRUN_MODEL workers are given
            continue
        for text in _strings(tree):
            if text in names:
                found[text].append(path.name)
    assert found == {name: [SCHEMA.name] for name in names}


# Fields of [limits] that make a declaration elsewhere a mirror of them (a few
# are shared by other records as words: the live state's concurrency, canary).
MIRROR = 6


def test_no_module_but_the_schema_lists_the_limits() -> None:
    """No other class declares the limits' fields, and no literal spells them
    out (a table of defaults, a mirror of the values)."""
    limits = set(Limits.model_fields)
    offenders = []
    for path, tree in _modules().items():
        # a packet written as a literal ({"limits": {...}}, the demo's) is a
        # definition the schema checks, not a declaration of its fields
        packets = {
            id(value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Dict)
            for key, value in zip(node.keys, node.values, strict=True)
            if isinstance(key, ast.Constant) and key.value == "limits"
        }
        for node in ast.walk(tree):
            if id(node) in packets:
                continue
            names: set[str] = set()
            if isinstance(node, ast.ClassDef) and not (path == SCHEMA and node.name in ("Limits",)):
                names = {
                    s.target.id
                    for s in node.body
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                }
            elif isinstance(node, ast.Dict):
                names = {k.value for k in node.keys if isinstance(k, ast.Constant)}  # type: ignore[misc]
            elif isinstance(node, ast.Tuple | ast.List | ast.Set):
                names = set(_strings(node))
            if len(names & limits) >= MIRROR:
                offenders.append(f"{path.name}:{node.lineno}")  # type: ignore[attr-defined]
    assert offenders == []


def test_the_checker_finds_a_mirror_of_the_limits() -> None:
    """The walk above sees a mirror when there is one."""
    fields = list(Limits.model_fields)[:MIRROR]
    tree = ast.parse("DEFAULTS = {" + ", ".join(f"{name!r}: 0" for name in fields) + "}")
    dicts = [n for n in ast.walk(tree) if isinstance(n, ast.Dict)]
    keys = {k.value for k in dicts[0].keys if isinstance(k, ast.Constant)}  # type: ignore[misc]
    assert len(keys & set(fields)) >= MIRROR


MARK_RULES = "rules-marker-0b7e"
MARK_NOTE = "note-marker-91c2"


@pytest.fixture
def external(git_repo: Path) -> Path:
    write_run(
        git_repo,
        "r",
        [{"id": f"t{i}", "outputs": [f"out/t{i}.json"], "note": MARK_NOTE} for i in range(3)],
        {
            "executor": {"kind": "external"},
            "rules": {"text": MARK_RULES},
            "limits": {"timeout": "17m", "canary": 0},
        },
    )
    commit_all(git_repo, "define r")
    return git_repo


def _local_files(repo: Path) -> dict[str, bytes]:
    home = repo / ".git" / "gitrun" / "r"
    return {
        str(path.relative_to(home)): path.read_bytes()
        for path in home.rglob("*")
        if path.is_file() and not path.name.endswith(".lock")
    }


def test_the_hook_rules_are_the_only_cached_form_of_a_definition(external: Path) -> None:
    """After a lead's day (check, start, status, a write hook, collect, next),
    no file of the run's local state holds its definition but the hook rules,
    which hold owned patterns alone."""
    for args in (("check", "r"), ("start", "r"), ("status", "r")):  # start leases a batch
        proc = run_gitrun(external, *args)
        assert proc.returncode == 0, (args, proc.stderr)
    (external / "out").mkdir(exist_ok=True)
    (external / "out" / "t0.json").write_text("{}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITRUN_")}
    hook = run_gitrun_call(
        ["hook", "pre-write"],
        external,
        env={**env, "GITRUN_RUN": "r", "GITRUN_TASK": "t0"},
        stdin=json.dumps({"tool_name": "Write", "tool_input": {"file_path": "out/t0.json"}}),
        timeout=60,
    )
    assert hook.returncode == 0, hook.stderr
    collected = run_gitrun(external, "collect", "r")
    assert "t0" in collected.stdout and "error" not in collected.stderr, collected.stderr
    assert run_gitrun(external, "next", "r").returncode in (0, 1)
    files = _local_files(external)
    assert "hook-rules.jsonl" in files
    for name, data in files.items():
        for mark in (MARK_RULES.encode(), MARK_NOTE.encode(), b'"timeout": 1020'):
            assert mark not in data, (name, mark)
    assert not {"definition.json", "run-view.jsonl", "tasks.cache.json"} & set(files)
