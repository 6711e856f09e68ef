"""The packet's schema: values are what they say, or a sentence says what was expected."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitrun.commands.scaffold import new_run
from gitrun.definition.load import load_run
from gitrun.definition.schema import Limits, parse_duration
from gitrun.errors import DefinitionError
from tests.helpers import write_run

TASKS = [{"id": "t1", "outputs": ["out/t1.json"]}]
PACKET = '[run]\nid = "r"\n[model]\ndefault = "m"\n[executor]\ncommand = ["true", "{pointer}"]\n'


def _errors(repo: Path, extra: str = "", environ: dict[str, str] | None = None) -> list[str]:
    run_dir = write_run(repo, "r", TASKS)
    (run_dir / "packet.toml").write_text(PACKET + extra)
    with pytest.raises(DefinitionError) as info:
        load_run(repo, "r", environ=environ or {})
    return info.value.lines


@pytest.mark.parametrize(
    ("toml", "field", "expected"),
    [
        ("[limits]\ntimeout = nan", "limits.timeout", "not a finite duration"),
        ("[limits]\ntimeout = inf", "limits.timeout", "not a finite duration"),
        ("[limits]\ntimeout = -inf", "limits.timeout", "not a finite duration"),
        ("[limits]\ntimeout = 1e300", "limits.timeout", "longer than 30 days"),
        ('[limits]\ntimeout = "99999999999999999999d"', "limits.timeout", "longer than 30 days"),
        ("[limits]\nkill_grace = nan", "limits.kill_grace", "not a finite duration"),
        ("[limits]\nbackoff_base = nan", "limits.backoff_base", "not a finite duration"),
        ("[limits]\nbackoff_cap = inf", "limits.backoff_cap", "not a finite duration"),
        ("[limits]\nbreaker_fast = nan", "limits.breaker_fast", "not a finite duration"),
        ("[limits]\nmax_load = nan", "limits.max_load", "expected a finite number"),
        ("[limits]\nmax_load = inf", "limits.max_load", "expected a finite number"),
        ('[limits]\nconcurrency = "4"', "limits.concurrency", "expected a whole number such as 4"),
        ("[limits]\nconcurrency = true", "limits.concurrency", "expected a whole number"),
        ("[limits]\nconcurrency = 4.0", "limits.concurrency", "expected a whole number"),
        ('[limits]\nmax_load = "2"', "limits.max_load", "expected a number"),
        ('[ownership]\nstrict = "yes"', "ownership.strict", "expected true or false"),
        ("[ownership]\nstrict = 1", "ownership.strict", "expected true or false"),
        ("[run]\ndescription = 5", "run.description", "expected text in quotes"),
        ('[ownership]\nprotected = "TODO.md"', "ownership.protected", "expected a list"),
        ('[model]\ndefault = " "', "model.default", "the model name is blank"),
        ('[model]\ndefault = ""', "model.default", "the model name is blank"),
        ('[model]\ndefault = "son\\nnet"', "model.default", "control character"),
        ('[model]\ndefault = " sonnet"', "model.default", "spaces around it"),
        ('[model.stages]\nreview = "\\t"', "model.stages.review", "blank"),
        ('[executor]\nargs = ["a\\u0000b"]', "executor.args[0]", "NUL"),
        ('[executor.env]\n"A=B" = "x"', "executor.env", "not an environment variable name"),
    ],
)
def test_values_that_are_not_what_they_say_are_rejected(
    git_repo: Path, toml: str, field: str, expected: str
) -> None:
    run_dir = write_run(git_repo, "r", TASKS)
    head = "" if toml.startswith("[run]") else '[run]\nid = "r"\n'
    (run_dir / "packet.toml").write_text(head + toml.replace("[run]\n", '[run]\nid = "r"\n') + "\n")
    with pytest.raises(DefinitionError) as info:
        load_run(git_repo, "r", environ={})
    [line] = info.value.lines
    assert line.startswith(".gitrun/runs/r/packet.toml:"), line
    assert f": {field}: " in line, line
    assert expected in line, line


@pytest.mark.parametrize(
    ("var", "value", "expected"),
    [
        ("GITRUN_MODEL", " ", "is set but blank"),
        ("GITRUN_MODEL", "", "is set but blank"),
        ("GITRUN_MODEL", "opus\n", "spaces around"),
        ("GITRUN_MODEL", "op\x01us", "control character"),
        ("GITRUN_CONCURRENCY", "4.0", "whole number written in decimal digits"),
        ("GITRUN_CONCURRENCY", " 4", "spaces around"),
        ("GITRUN_CONCURRENCY", "0x10", "whole number written in decimal digits"),
        ("GITRUN_CONCURRENCY", "+4", "whole number written in decimal digits"),
        ("GITRUN_CONCURRENCY", "\u0664", "whole number written in decimal digits"),
        ("GITRUN_CONCURRENCY", "true", "whole number written in decimal digits"),
        ("GITRUN_CONCURRENCY", "0", "greater than 0"),
        ("GITRUN_CONCURRENCY", "9" * 5000, "whole number written in decimal digits"),
        ("GITRUN_CANARY", "-1", "whole number written in decimal digits"),
        ("GITRUN_TIMEOUT", "nan", "not a duration"),
        ("GITRUN_TIMEOUT", "0", "longer than zero"),
        ("GITRUN_TIMEOUT", "9" * 400, "not a finite duration"),
        ("GITRUN_MAX_LOAD", "inf", "number written in decimal digits"),
        ("GITRUN_MAX_LOAD", "nan", "number written in decimal digits"),
        ("GITRUN_MAX_LOAD", "1e3", "number written in decimal digits"),
        ("GITRUN_HALT", "sometimes", "not a halt policy"),
    ],
)
def test_environment_overrides_are_parsed_to_their_type(
    git_repo: Path, var: str, value: str, expected: str
) -> None:
    lines = _errors(git_repo, environ={var: value})
    [line] = lines
    assert line.startswith(f"environment variable {var}="), line
    assert expected in line, line
    assert line.endswith("fix or unset it")


def test_environment_overrides_that_are_right_apply(git_repo: Path) -> None:
    write_run(git_repo, "r", TASKS)
    environ = {
        "GITRUN_MODEL": "opus",
        "GITRUN_CONCURRENCY": "7",
        "GITRUN_TIMEOUT": "90s",
        "GITRUN_MAX_LOAD": "2.5",
        "GITRUN_HALT": "fail=10%",
    }
    packet = load_run(git_repo, "r", environ=environ).packet
    assert packet.model.default == "opus"
    assert packet.limits.concurrency == 7
    assert packet.limits.timeout == 90.0
    assert packet.limits.max_load == 2.5
    assert packet.limits.halt == "fail=10%"


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "nan", "inf", True, 0, -1, "1e999"])
def test_parse_duration_refuses_what_is_not_a_finite_positive_duration(value: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(value)


def test_limits_keep_their_defaults_finite() -> None:
    limits = Limits()
    for name in ("timeout", "kill_grace", "backoff_base", "backoff_cap", "breaker_fast"):
        assert 0 < getattr(limits, name) < float("inf")


def test_unknown_key_of_an_output_table_lists_its_fields(git_repo: Path) -> None:
    write_run(git_repo, "r", [{"id": "t1", "outputs": [{"path": "a.json", "bogus": 1}]}])
    with pytest.raises(DefinitionError) as info:
        load_run(git_repo, "r", environ={})
    [line] = info.value.lines
    assert line.endswith(
        "task[0] (id 't1').outputs[0].bogus: unknown field; remove it or fix "
        "the spelling (known fields: path, validators, edits)"
    ), line


def test_output_of_the_wrong_type_is_one_sentence(git_repo: Path) -> None:
    write_run(git_repo, "r", [{"id": "t1", "outputs": [1]}])
    with pytest.raises(DefinitionError) as info:
        load_run(git_repo, "r", environ={})
    [line] = info.value.lines
    assert "outputs[0]: expected text in quotes or a table with path and validators" in line


def test_unknown_key_of_a_validator_lists_that_kind_s_fields(git_repo: Path) -> None:
    lines = _errors(git_repo, '[validators.v]\nkind = "regex"\npattern = "x"\nbogus = 1\n')
    [line] = lines
    assert ":10: validators.v.bogus: unknown field" in line, line
    assert "known fields: kind, pattern" in line


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(description=st.text(max_size=40))
def test_new_writes_any_description_so_that_it_reads_back(git_repo: Path, description: str) -> None:
    import shutil

    shutil.rmtree(git_repo / ".gitrun", ignore_errors=True)
    new_run(git_repo, "r", description=description)
    text = (git_repo / ".gitrun/runs/r/packet.toml").read_text(encoding="utf-8")
    assert tomllib.loads(text)["run"]["description"] == description
    assert "# Workers are dispatched a two-line pointer" in text  # the comments stay
    run = load_run(git_repo, "r", environ={})
    assert run.packet.run.description == description


@pytest.mark.parametrize("description", ['a "quoted" word', "back\\slash", "two\nlines", "\\u0041"])
def test_new_with_awkward_descriptions_then_check(git_repo: Path, description: str) -> None:
    new_run(git_repo, "r", description=description)
    assert load_run(git_repo, "r", environ={}).packet.run.description == description


@pytest.mark.parametrize(
    "halt", ["fail=5\n", "fail=\u0663", "fail=5%%", "fail=", "fail=1" + "0" * 30]
)
def test_a_halt_policy_is_the_whole_value(git_repo: Path, halt: str) -> None:
    """A trailing newline, a digit of another script or a number too big
    for the budget is not a halt policy: one sentence names the field."""
    write_run(git_repo, "r", TASKS, {"limits": {"halt": halt}})
    with pytest.raises(DefinitionError) as caught:
        load_run(git_repo, "r")
    assert "limits.halt" in str(caught.value) and "not a halt policy" in str(caught.value)
