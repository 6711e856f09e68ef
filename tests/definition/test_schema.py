"""The schema is pydantic's models, checked by pydantic, and each table refuses what it does not know."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from gitrun.definition.load import load_run
from gitrun.definition.messages import fields_of, unwrap
from gitrun.definition.runfiles import definition_paths
from gitrun.definition.schema import Packet, RepoConfig, TaskFile
from tests.helpers import commit_all, run_gitrun, write_run


def _tables(model: type[BaseModel], found: set[type[BaseModel]]) -> set[type[BaseModel]]:
    """``model`` and every table reachable from its fields (in lists, dicts and unions)."""
    found.add(model)
    todo = [unwrap(annotation) for annotation in fields_of(model).values()]
    while todo:
        annotation = unwrap(todo.pop())
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in found:
                _tables(annotation, found)
            continue
        todo += [a for a in getattr(annotation, "__args__", ()) if a is not type(None)]
    return found


def test_every_table_is_a_strict_pydantic_model_that_refuses_unknown_fields() -> None:
    tables = set[type[BaseModel]]()
    for root in (Packet, TaskFile, RepoConfig):
        _tables(root, tables)
    names = {table.__name__ for table in tables}
    assert {"Limits", "Executor", "Task", "OutputSpec", "RegexValidator", "StageResources"} <= names
    for table in tables:
        config = table.model_config
        assert (config.get("extra"), config.get("strict"), config.get("frozen")) == (
            "forbid",
            True,
            True,
        ), table.__name__
        assert config.get("allow_inf_nan") is False, table.__name__


def test_a_json_schema_validator_is_read_beside_validators_that_have_no_schema(
    git_repo: Path,
) -> None:
    """A ``json_schema`` validator's ``schema`` is a field; the other kinds have
    none, and asking them for one is no path (pydantic's models answer
    ``schema`` with a method of their own)."""
    run_dir = write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": [{"path": "out/t1.json", "validators": ["shape", "plain"]}]}],
        {
            "validators": {
                "shape": {"kind": "json_schema", "schema": ".gitrun/runs/r/shape.json"},
                "plain": {"kind": "json"},
                "lines": {"kind": "min_bytes", "min": 2},
            }
        },
    )
    (run_dir / "shape.json").write_text(json.dumps({"type": "object"}))
    commit_all(git_repo, "define r")
    run = load_run(git_repo, "r")
    assert ".gitrun/runs/r/shape.json" in definition_paths(run)
    proc = run_gitrun(git_repo, "check", "r")
    assert proc.returncode == 0, proc.stdout + proc.stderr
