"""The bad-input corpus: what a careless (or hostile) user writes, for every command.

For every case: no traceback, no internal error (exit 70), a non-zero exit,
and a message naming the file (or variable, or option) and the field, line
or entry. Hook cases assert their documented answers instead. Most cases run
in-process against one real repository per group (the case rewrites the
run's files); a handful run as real processes.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from typer.testing import CliRunner

from gitrun.cli.main import app
from gitrun.definition.layers import merge  # tables merge the way configuration layers do
from gitrun.store.ledger import chunk_name
from tests.forkserver import run_gitrun_call
from tests.helpers import build_tree, git_env

RUN = "r"
RUN_DIR = f".gitrun/runs/{RUN}"
PACKET = f"{RUN_DIR}/packet.toml"
TASKS = f"{RUN_DIR}/tasks.toml"
CONFIG = ".gitrun/config.toml"
BASE_PACKET: dict[str, Any] = {
    "run": {"id": RUN},
    "model": {"default": "test-model"},
    "executor": {"kind": "command", "command": ["true", "{pointer}"]},
}
BASE_TASKS: list[dict[str, Any]] = [{"id": "t1", "outputs": ["out/t1.json"]}]

runner = CliRunner()


@dataclass
class Case:
    """One bad input: files to write (text or bytes; None deletes), the command
    line, the environment, stdin, and a regex the output must match."""

    name: str
    expect: str
    files: dict[str, str | bytes | None] = field(default_factory=dict)
    args: list[str] = field(default_factory=lambda: ["check", RUN])
    env: dict[str, str] = field(default_factory=dict)
    stdin: str | None = None
    codes: tuple[int, ...] = (1, 2)

    def __str__(self) -> str:
        return self.name


def _where(file: str, dotted: str) -> str:
    """``<file>(:<line>)?: <field>`` as a regex."""
    return rf"{re.escape(file)}(:\d+)*: {re.escape(dotted)}(?=[\s.:\[(]|$)"


def _packet_case(name: str, override: dict[str, Any], dotted: str, target: str = PACKET) -> Case:
    if target == PACKET:
        files: dict[str, str | bytes | None] = {PACKET: tomli_w.dumps(merge(BASE_PACKET, override))}
    else:
        files = {target: tomli_w.dumps(override)}
    return Case(name, _where(target, dotted), files)


# -- values -------------------------------------------------------------------------------

NAN, INF = math.nan, math.inf
WRONG_TYPES: list[Any] = [[], {}, [1], {"a": 1}]
TEXT_JUNK = ["", " ", "\t", "a\x00b", "\x1b[31m", "x" * 5000]
INTS_POSITIVE = ["concurrency", "max_attempts", "payload_budget", "grow_after"]
INTS_NONNEG = ["canary", "max_spawns", "breaker_window"]
DURATIONS = ["timeout", "kill_grace", "backoff_base", "backoff_cap", "breaker_fast"]


def _limits_cases() -> Iterator[Case]:
    for key in INTS_POSITIVE + INTS_NONNEG:
        bad: list[Any] = ["4", True, False, 4.5, 4.0, NAN, INF, -1, -(2**63), *WRONG_TYPES]
        if key in INTS_POSITIVE:
            bad.append(0)
        for value in bad:
            yield _packet_case(f"limits.{key}={value!r}", {"limits": {key: value}}, f"limits.{key}")
    for key in DURATIONS:
        bad = [NAN, INF, -INF, 0, -1, 1e300, True, "soon", "", " ", "nan", "inf", "1e9", "9" * 400]
        bad += ["20m\x00", "-5m", "5 minutes", *WRONG_TYPES]
        for value in bad:
            yield _packet_case(f"limits.{key}={value!r}", {"limits": {key: value}}, f"limits.{key}")
    for value in [NAN, INF, -1, 0, "2", True, [], {}]:
        yield _packet_case(
            f"limits.max_load={value!r}", {"limits": {"max_load": value}}, "limits.max_load"
        )
    for value in [5, "", "fail", "fail=x", "fail=-1", "fail=5%%", True, []]:
        yield _packet_case(f"limits.halt={value!r}", {"limits": {"halt": value}}, "limits.halt")
    for value in ["x", [1], ["("], ["a{99999999999}"], [True], {}]:
        yield _packet_case(
            f"limits.throttle_patterns={value!r}",
            {"limits": {"throttle_patterns": value}},
            "limits.throttle_patterns",
        )
    yield _packet_case("limits=5", {"limits": 5}, "limits")
    yield _packet_case("limits.concurency", {"limits": {"concurency": 4}}, "limits.concurency")


def _model_cases() -> Iterator[Case]:
    for value in ["", " ", "\t", "a\nb", "a\x00", " sonnet", "sonnet ", "\x7f", 5, True, [], {}]:
        yield _packet_case(
            f"model.default={value!r}", {"model": {"default": value}}, "model.default"
        )
    for value in ["", " ", 5, "a\x01"]:
        yield _packet_case(
            f"model.stages.work={value!r}",
            {"model": {"stages": {"work": value}}},
            "model.stages.work",
        )
    yield _packet_case("model.stages='x'", {"model": {"stages": "x"}}, "model.stages")
    yield _packet_case("model.bogus", {"model": {"bogus": "x"}}, "model.bogus")


def _executor_cases() -> Iterator[Case]:
    ex = "executor"
    for value in ["shell", 5, "", True]:
        yield _packet_case(f"executor.kind={value!r}", {ex: {"kind": value}}, "executor.kind")
    for value in [5, [], True]:
        yield _packet_case(f"executor.preset={value!r}", {ex: {"preset": value}}, "executor.preset")
    for value in [[], "true {pointer}", [1], ["tr\x00ue", "{pointer}"], [True], {}]:
        yield _packet_case(
            f"executor.command={value!r}", {ex: {"command": value}}, "executor.command"
        )
    for value in [5, "a\x00", []]:
        yield _packet_case(f"executor.shell={value!r}", {ex: {"shell": value}}, "executor.shell")
    for value in ["x", [1], ["\x00"], {}]:
        yield _packet_case(f"executor.args={value!r}", {ex: {"args": value}}, "executor.args")
    for value in ["x", {"A": 1}, {"A=B": "x"}, {"": "x"}, {"A": "\x00"}, {"1A": "x"}, []]:
        yield _packet_case(f"executor.env={value!r}", {ex: {"env": value}}, "executor.env")
    yield _packet_case("executor.bogus", {ex: {"bogus": 1}}, "executor.bogus")


def _other_packet_cases() -> Iterator[Case]:
    for value in ["", "A", "a/b", "..", 5, "x" * 65, "-a", "a b", "a\x00"]:
        yield _packet_case(f"run.id={value!r}", {"run": {"id": value}}, "run.id")
    for value in [5, [], True]:
        yield _packet_case(
            f"run.description={value!r}", {"run": {"description": value}}, "run.description"
        )
    yield _packet_case("run.bogus", {"run": {"bogus": 1}}, "run.bogus")
    yield _packet_case("run=5", {"run": 5}, "run")
    for value in [5, [], True]:
        yield _packet_case(f"rules.text={value!r}", {"rules": {"text": value}}, "rules.text")
    for value in ["x", [1], [[]]]:
        yield _packet_case(
            f"rules.acceptance={value!r}", {"rules": {"acceptance": value}}, "rules.acceptance"
        )
    for value in ["TODO.md", [1], {}, True]:
        yield _packet_case(
            f"ownership.protected={value!r}",
            {"ownership": {"protected": value}},
            "ownership.protected",
        )
    for value in ["yes", 1, "true", 0, [], NAN]:
        yield _packet_case(
            f"ownership.strict={value!r}", {"ownership": {"strict": value}}, "ownership.strict"
        )
    for value in [[], "x", [1], [{}], [{"name": "A"}], [{"name": "w", "bogus": 1}], [{"name": 5}]]:
        yield _packet_case(f"stages={value!r}", {"stages": value}, "stages")
    for value in ["json", [1], {}, True]:
        yield _packet_case(
            f"outputs.validators={value!r}",
            {"outputs": {"validators": value}},
            "outputs.validators",
        )
    validators: list[tuple[Any, str]] = [
        ({"kind": "nope"}, "validators.v"),
        ({}, "validators.v"),
        (5, "validators.v"),
        ({"kind": 5}, "validators.v"),
        ({"kind": "regex"}, "validators.v.pattern"),
        ({"kind": "regex", "pattern": "("}, "validators.v.pattern"),
        ({"kind": "regex", "pattern": 5}, "validators.v.pattern"),
        ({"kind": "min_bytes", "min": 0}, "validators.v.min"),
        ({"kind": "min_bytes", "min": "1"}, "validators.v.min"),
        ({"kind": "min_bytes", "min": NAN}, "validators.v.min"),
        ({"kind": "command", "command": []}, "validators.v.command"),
        ({"kind": "command", "command": "x"}, "validators.v.command"),
        ({"kind": "command", "command": ["a\x00"]}, "validators.v.command"),
        ({"kind": "json", "x": 1}, "validators.v.x"),
        ({"kind": "json_schema"}, "validators.v.schema"),
        ({"kind": "json_schema", "schema": 5}, "validators.v.schema"),
    ]
    for value, dotted in validators:
        yield _packet_case(f"validators.v={value!r}", {"validators": {"v": value}}, dotted)
    yield _packet_case("unknown table", {"bogus": {"a": 1}}, "bogus")
    yield _packet_case("unknown root key", {"bogus": 1}, "bogus")


def _config_cases() -> Iterator[Case]:
    """The same kinds of mistakes in .gitrun/config.toml name that file."""
    config: list[tuple[dict[str, Any], str]] = [
        ({"limits": {"timeout": NAN}}, "limits.timeout"),
        ({"limits": {"kill_grace": INF}}, "limits.kill_grace"),
        ({"limits": {"concurrency": "4"}}, "limits.concurrency"),
        ({"limits": {"concurrency": True}}, "limits.concurrency"),
        ({"limits": {"max_load": NAN}}, "limits.max_load"),
        ({"model": {"default": " "}}, "model.default"),
        ({"model": {"default": 5}}, "model.default"),
        ({"executor": {"command": []}}, "executor.command"),
        ({"executor": {"env": {"A": 1}}}, "executor.env"),
        ({"ownership": {"strict": "yes"}}, "ownership.strict"),
        ({"ownership": {"protected": "x"}}, "ownership.protected"),
        ({"validators": {"v": {"kind": "nope"}}}, "validators.v"),
        ({"outputs": {"validators": "json"}}, "outputs.validators"),
        ({"run": {"id": RUN}}, "run"),  # a packet-only table
        ({"stages": [{"name": "work"}]}, "stages"),
        ({"bogus": {"a": 1}}, "bogus"),
        ({"limits": {"bogus": 1}}, "limits.bogus"),
    ]
    for override, dotted in config:
        yield _packet_case(f"config {override!r}", override, dotted, target=CONFIG)


def _task_case(name: str, task: dict[str, Any] | Any, expect: str) -> Case:
    return Case(name, expect, {TASKS: tomli_w.dumps({"task": [task]})})


def _task_cases() -> Iterator[Case]:
    base = {"id": "t1", "outputs": ["out/t1.json"]}
    for value in ["", "A", "a/b", "..", 5, "x" * 65, "t 1", "t\x00", [], True]:
        yield _task_case(f"task.id={value!r}", {**base, "id": value}, _where(TASKS, "task[0]"))
    schema = [
        ("stage", [5, [], True]),
        ("inputs", ["x", [1], {}, [[]]]),
        ("owns", ["x", [1], {}, True]),
        ("outputs", [[], "x", [1], [{}], [{"path": 1}], [{"path": "a", "bogus": 1}], [True]]),
        ("outputs", [[{"path": "a", "validators": "json"}], [{"validators": ["json"]}], {}]),
        ("note", [5, [], "a\x00b"]),
        ("bundle", [5, []]),
        ("bogus", [1]),
    ]
    for key, values in schema:
        for value in values:
            yield _task_case(
                f"task.{key}={value!r}",
                {**base, key: value},
                _where(TASKS, f"task[0] (id 't1').{key}"),
            )
    # Whole-table mistakes.
    shapes: list[tuple[str, str]] = [
        ("task = 5", "task"),
        ("task = [1]", "task[0]"),
        ('task = "x"', "task"),
        ('[task]\nid = "t1"\noutputs = ["a"]\n', "task"),
        ('[[task]]\noutputs = ["a"]\n', "task[0].id"),
        ('[[task]]\nid = "t1"\n', "task[0] (id 't1').outputs"),
        ("[[task]]\n", "task[0].id"),
        ('[[tasks]]\nid = "t1"\n', "tasks"),
        ('[[task]]\nid = "t1"\noutputs = ["a"]\n[task.x]\n', "task[0] (id 't1').x"),
    ]
    for text, dotted in shapes:
        yield Case(f"tasks.toml {text!r}", _where(TASKS, dotted), {TASKS: text})


# Entries other engineers make into check problems (canonical paths, ownership);
# check must exit 1 and name the tasks file and the task.
NON_CANONICAL = [
    "./out/a.json",
    "out/./a.json",
    "out//a.json",
    "out/x/../a.json",
    "../a.json",
    "/abs/a.json",
    ".GIT/config",
    ".git/config",
    "out/a.json ",
    " out/a.json",
    "out/a\x00.json",
    "out/a\x01.json",
    "out/a\n.json",
    "out/" + "a" * 256 + ".json",
    "",
]
# Not canonical for an output or an input; fine for owns (a directory) or inputs (read only).
NOT_AN_OUTPUT = ["out/a.json/", ".gitrun/runs/r/packet.toml", "TODO.md", "PROGRESS.md"]


def _path_cases() -> Iterator[Case]:
    for path in NON_CANONICAL:
        expect = rf"{re.escape(TASKS)}(:\d+)*: .*\bt1\b"
        yield _task_case(f"outputs=[{path!r}]", {"id": "t1", "outputs": [path]}, expect)
        owns = {"id": "t1", "outputs": ["out/t1.json"], "owns": ["out/t1.json", path]}
        yield _task_case(f"owns=[{path!r}]", owns, expect)
        yield _task_case(
            f"inputs=[{path!r}]", {"id": "t1", "outputs": ["out/t1.json"], "inputs": [path]}, expect
        )
    for path in NOT_AN_OUTPUT:
        expect = rf"{re.escape(TASKS)}(:\d+)*: .*\bt1\b"
        yield _task_case(f"outputs=[{path!r}]", {"id": "t1", "outputs": [path]}, expect)
        if path != "out/a.json/":  # owning a directory is fine
            owns = {"id": "t1", "outputs": ["out/t1.json"], "owns": ["out/t1.json", path]}
            yield _task_case(f"owns=[{path!r}]", owns, expect)
    for text in ["./TODO.md", "../x", "/x", "a//b", ".git/x"]:
        yield Case(
            f"protected {text!r}",
            rf"{re.escape(PACKET)}(:\d+)*: .*{re.escape(repr(text))}",
            {PACKET: tomli_w.dumps(merge(BASE_PACKET, {"ownership": {"protected": [text]}}))},
        )
    overlap = [
        {"id": "t1", "outputs": ["out/a.json"], "owns": ["out/"]},
        {"id": "t2", "outputs": ["out/b.json"], "owns": ["out/*.json"]},
    ]
    yield Case(
        "overlapping owns",
        rf"{re.escape(TASKS)}.*t1 and t2",
        {TASKS: tomli_w.dumps({"task": overlap})},
    )
    inject = {"executor": {"command": ["sh", "-c", "echo {pointer}"]}}
    yield Case(
        "embedded placeholder",
        rf"{re.escape(PACKET)}(:\d+)*: .*executor",
        {PACKET: tomli_w.dumps(merge(BASE_PACKET, inject))},
    )


def _file_cases() -> Iterator[Case]:
    """Broken files as a whole: bytes, syntax, shapes."""
    raw = [
        (PACKET, b"", _where(PACKET, "run")),
        (PACKET, b"\xef\xbb\xbf[run]\nid = 'r'\n", rf"{re.escape(PACKET)}:1: .*byte order mark"),
        (PACKET, b"[run]\nid = '\xff'\n", rf"{re.escape(PACKET)}:2: is not UTF-8"),
        (PACKET, b"[run\n", rf"{re.escape(PACKET)}:1:\d+: invalid TOML"),
        (PACKET, b"[run]\nid = 'r'\nid = 'r'\n", rf"{re.escape(PACKET)}:3:\d+: invalid TOML"),
        (PACKET, b"[[run]]\nid = 'r'\n", _where(PACKET, "run")),
        (PACKET, b"x = " + b"[" * 3000 + b"]" * 3000, rf"{re.escape(PACKET)}: .*nested too deeply"),
        (PACKET, b"[rules]\nacceptance = " + b"[" * 200 + b"]" * 200, _where(PACKET, "run")),
        (PACKET, b"\x00\x01\x02", rf"{re.escape(PACKET)}:1:\d+: invalid TOML"),
        (PACKET, "[run]\r\nid = 'r'\r\nbogus = 1\r\n", _where(PACKET, "run.bogus")),
        (TASKS, b"", rf"{re.escape(TASKS)}: .*no tasks"),
        (TASKS, b"\xef\xbb\xbf", rf"{re.escape(TASKS)}:1: .*byte order mark"),
        (TASKS, b"[[task]]\nid = '\xfe'\n", rf"{re.escape(TASKS)}:2: is not UTF-8"),
        (TASKS, b"[[task]\n", rf"{re.escape(TASKS)}:1:\d+: invalid TOML"),
        (TASKS, b"[[task]]\nid = 't1'\nid = 't2'\n", rf"{re.escape(TASKS)}:3:\d+: invalid TOML"),
        (
            TASKS,
            b"task = " + b"[" * 3000 + b"]" * 3000,
            rf"{re.escape(TASKS)}: .*nested too deeply",
        ),
        (CONFIG, b"[limits\n", rf"{re.escape(CONFIG)}:1:\d+: invalid TOML"),
        (CONFIG, b"\xff", rf"{re.escape(CONFIG)}:1: is not UTF-8"),
        (CONFIG, b"x = " + b"[" * 3000 + b"]" * 3000, rf"{re.escape(CONFIG)}: .*nested too deeply"),
    ]
    for path, data, expect in raw:
        yield Case(f"{Path(path).name} bytes {data[:24]!r}", expect, {path: data})
    yield Case("tasks.toml missing", rf"{re.escape(TASKS)}: file not found", {TASKS: None})


def _env_cases() -> Iterator[Case]:
    ints = ["GITRUN_CONCURRENCY", "GITRUN_CANARY", "GITRUN_MAX_ATTEMPTS", "GITRUN_MAX_SPAWNS"]
    ints.append("GITRUN_PAYLOAD_BUDGET")
    bad_int = ["", " ", "x", "-1", "1.5", "nan", "inf", "0x10", "4 ", "\t4", "1e3", "\uff19"]
    bad_int += ["9" * 30, "true", "1_000"]
    values: dict[str, list[str]] = {var: bad_int for var in ints}
    values["GITRUN_TIMEOUT"] = ["", " ", "nan", "inf", "0", "-5m", "soon", "9" * 400, "31d"]
    values["GITRUN_MAX_LOAD"] = ["", " ", "nan", "inf", "-1", "0", "1e3", "x"]
    values["GITRUN_MODEL"] = ["", " ", "\t", "a\x01b", " sonnet", "sonnet\n"]
    values["GITRUN_HALT"] = ["", " ", "fail", "fail=x", "sometimes"]
    for var, bad in values.items():
        for value in bad:
            expect = rf"environment variable {var}="
            yield Case(f"{var}={value!r}", expect, env={var: value})


def _cli_cases() -> Iterator[Case]:
    bad_ids = ["../x", "a/b", "..", "/x", "A", "-", "a b", "x" * 65, "", "r\x01"]
    for command in ["check", "start", "resume", "status", "log", "land", "retry", "next"]:
        for run_id in bad_ids:
            yield Case(
                f"{command} {run_id!r}",
                rf"{re.escape(repr(run_id))} is not a valid run id",
                args=[command, run_id],
            )
    for command in [
        "check",
        "start",
        "resume",
        "status",
        "log",
        "land",
        "retry",
        "next",
        "collect",
    ]:
        yield Case(f"{command} unknown run", r"(no run 'nope'|gitrun/nope)", args=[command, "nope"])
    new_args: list[tuple[list[str], str]] = [
        (["new", "x", "--per-task", "0"], "--per-task"),
        (["new", "x", "--per-task", "-1"], "--per-task"),
        (["new", "x", "--per-task", "many"], "--per-task"),
        (["new", "x", "--executor", "ssh"], "--executor"),
        (["new", "x", "--inputs", "*.md"], "--inputs and --output"),
        (["new", "x", "--inputs", "/etc/*", "--output", "o/{stem}"], "--inputs"),
        (["new", "x", "--inputs", "../*", "--output", "o/{stem}"], "--inputs"),
        (["new", "x", "--inputs", "nothing/*.md", "--output", "o/{stem}"], "--inputs"),
        (["new", "x", "--inputs", "*.md", "--output", "o/{nope}"], "--output"),
        (["new", "x", "--inputs", "*.md", "--output", "o/{stem.x}"], "--output"),
        (["new", "x", "--inputs", "*.md", "--output", "o/{0}"], "--output"),
        (["new", "x", "--inputs", "*.md", "--output", "o/{"], "--output"),
        (["new", "x", "--inputs", "docs/*.md", "--output", "same.json"], "--output"),
        (["new", "X"], "not a valid run id"),
        (["new", "../x"], "not a valid run id"),
        (["watchdog", "--stale", "nan"], "--stale"),
        (["watchdog", "--stale", "inf"], "--stale"),
        (["watchdog", "--stale", "0"], "--stale"),
        (["watchdog", "--stale", "-1m"], "--stale"),
        (["watchdog", "--stale", ""], "--stale"),
        (["next", RUN, "--max", "0"], "--max"),
        (["next", RUN, "--max", "-3"], "--max"),
        (["next", RUN, "--max", "x"], "--max"),
        (["status", RUN, "--bogus"], "--bogus"),
        (["bogus"], "bogus"),
    ]
    for args, expect in new_args:
        yield Case(" ".join(args), re.escape(expect), args=args)


def _all_cases() -> list[Case]:
    groups = [
        _limits_cases,
        _model_cases,
        _executor_cases,
        _other_packet_cases,
        _config_cases,
        _task_cases,
        _path_cases,
        _file_cases,
        _env_cases,
        _cli_cases,
    ]
    cases = [case for group in groups for case in group()]
    names = [case.name for case in cases]
    assert len(names) == len(set(names)), "every case has its own name"
    return cases


CASES = _all_cases()


# -- running ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real repository for the in-process cases; each case rewrites the run."""
    root = tmp_path_factory.mktemp("corpus")
    env = git_env(root)
    repo = root / "repo"
    repo.mkdir()
    build_tree(repo, {"README.md": "# sample\n", "docs/a.md": "a\n", "docs/b.md": "b\n"})
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "initial"]):
        subprocess.run(["git", "-C", str(repo), *argv], check=True, env=env)
    return repo


def _reset(repo: Path, files: dict[str, str | bytes | None]) -> None:
    shutil.rmtree(repo / ".gitrun", ignore_errors=True)
    shutil.rmtree(repo / ".git" / "gitrun", ignore_errors=True)
    shutil.rmtree(repo / "o", ignore_errors=True)
    layout: dict[str, str | bytes | None] = {
        PACKET: tomli_w.dumps(BASE_PACKET),
        TASKS: tomli_w.dumps({"task": BASE_TASKS}),
    }
    layout.update(files)
    for rel, content in layout.items():
        path = repo / rel
        if content is None:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def _assert_clean_failure(output: str, code: int, case: Case) -> None:
    assert "Traceback" not in output, output
    assert "internal error" not in output, output
    assert code not in (0, 70), f"exit {code}: {output}"
    assert code in case.codes, f"exit {code}: {output}"
    assert re.search(case.expect, output), f"{case.expect!r} not in:\n{output}"


@pytest.mark.parametrize("case", CASES, ids=str)
def test_bad_input(shared_repo: Path, case: Case) -> None:
    _reset(shared_repo, case.files)
    result = runner.invoke(app, ["-C", str(shared_repo), *case.args], env=case.env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    _assert_clean_failure(result.output, result.exit_code, case)


def test_the_corpus_is_big_enough() -> None:
    assert len(CASES) >= 300


# -- state the user (or a crash) broke --------------------------------------------------


def _cli(
    repo: Path, *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> Any:
    return runner.invoke(app, ["-C", str(repo), *args], input=stdin, env=env)


STATE_CASES: list[tuple[str, dict[str, str | bytes | None], list[str], str]] = [
    (
        "ledger is a directory",
        {},
        ["status", RUN],
        r"\.gitrun/runs/r/ledger/0000/000001\.jsonl: is a directory",
    ),
    ("ledger is a directory, retry", {}, ["retry", RUN], r"000001\.jsonl: is a directory"),
    ("packet is a directory", {}, ["check", RUN], r"packet\.toml: is not a regular file"),
    ("tasks is a directory", {}, ["status", RUN], r"tasks\.toml: is not a regular file"),
    ("run dir is a symlink", {}, ["check", RUN], r"\.gitrun/runs/r: is a symlink"),
    ("packet is a symlink", {}, ["start", RUN], r"packet\.toml: is a symlink"),
    ("runs dir is a file", {}, ["check", RUN], r"no run 'r'"),
    ("config is a directory", {}, ["check", RUN], r"\.gitrun/config\.toml: is a directory"),
    ("local state is a file", {}, ["watchdog"], r"r: damaged: .*\.git/gitrun/r is not a directory"),
    ("-C is a file", {}, ["-C", "README.md", "status"], r"README\.md is not inside a git"),
    ("-C does not exist", {}, ["-C", "nowhere", "status"], r"nowhere is not inside a git"),
]


@pytest.mark.parametrize(
    ("name", "files", "args", "expect"), STATE_CASES, ids=[c[0] for c in STATE_CASES]
)
def test_broken_state(
    git_repo: Path, name: str, files: dict[str, str | bytes | None], args: list[str], expect: str
) -> None:
    _reset(git_repo, files)
    run_dir = git_repo / RUN_DIR
    if name.startswith("ledger is a directory"):
        (run_dir / chunk_name(1)).mkdir(parents=True)
    elif name in ("packet is a directory", "tasks is a directory"):
        target = run_dir / ("packet.toml" if name.startswith("packet") else "tasks.toml")
        target.unlink()
        target.mkdir()
    elif name == "run dir is a symlink":
        elsewhere = git_repo.parent / "elsewhere"
        shutil.copytree(run_dir, elsewhere)
        shutil.rmtree(run_dir)
        run_dir.symlink_to(elsewhere)
    elif name == "packet is a symlink":
        (git_repo / "p.toml").write_bytes((run_dir / "packet.toml").read_bytes())
        (run_dir / "packet.toml").unlink()
        (run_dir / "packet.toml").symlink_to(git_repo / "p.toml")
    elif name == "runs dir is a file":
        shutil.rmtree(git_repo / ".gitrun")
        build_tree(git_repo, {".gitrun/runs": "not a directory"})
    elif name == "config is a directory":
        (git_repo / CONFIG).mkdir()
    elif name == "local state is a file":
        build_tree(git_repo, {f".git/gitrun/{RUN}": "not a directory"})
    result = runner.invoke(app, args, env={}) if args[0] == "-C" else _cli(git_repo, *args)
    case = Case(name, expect)
    _assert_clean_failure(result.output, result.exit_code, case)


def test_tolerated_state_is_not_an_error(git_repo: Path) -> None:
    """Lines a crash cut short, bytes that are not UTF-8 and junk records in the
    ledger and the local journal are skipped: status still answers."""
    _reset(git_repo, {})
    chunk = git_repo / RUN_DIR / chunk_name(1)
    chunk.parent.mkdir(parents=True)
    chunk.write_bytes(
        b'{"task": "t1", "attempt": 1, "outcome": "missing"}\n\xff\xfe\n[1]\n{"task": 5}\n{"tas'
    )
    journal = git_repo / ".git/gitrun" / RUN / "running.jsonl"
    journal.parent.mkdir(parents=True)
    journal.write_bytes(b'{"event": "x"}\n[1]\n{"task": 5}\n{"task": null}\n\xff\n')
    for args in (["status", RUN], ["status", RUN, "--json"], ["status"], ["retry", RUN]):
        result = _cli(git_repo, *args)
        assert result.exit_code == 0, result.output
        assert "Traceback" not in result.output


# -- hooks -------------------------------------------------------------------------------

HOOK_STDIN = [
    "",
    "not json",
    "[1]",
    "5",
    "null",
    '{"tool_input": 5}',
    '{"tool_name": 5}',
    '{"tool_name": "Write", "tool_input": {"file_path": 5}}',
    '{"tool_name": "Write", "tool_input": {}}',
    '{"tool_name": "Write", "cwd": 7}',
    '{"tool_name": "Write", "tool_input": {"file_path": "\\u0000"}}',
    "\x00\x01",
]


@pytest.mark.parametrize("stdin", HOOK_STDIN)
def test_pre_write_hook_with_bad_stdin(git_repo: Path, stdin: str) -> None:
    """Documented: outside a task it allows (exit 0, silent); in a task's context
    input it cannot judge blocks the write (exit 2, a reason on stderr)."""
    _reset(git_repo, {})
    outside = _cli(git_repo, "hook", "pre-write", stdin=stdin)
    assert outside.exit_code == 0 and outside.output == "", outside.output
    inside = _cli(
        git_repo, "hook", "pre-write", stdin=stdin, env={"GITRUN_RUN": RUN, "GITRUN_TASK": "t1"}
    )
    assert "Traceback" not in inside.output
    if not stdin.lstrip().startswith("{"):  # not a JSON object: cannot judge, blocks
        assert inside.exit_code == 2, inside.output
        assert "malformed hook input" in inside.output and "write blocked" in inside.output
    elif '"Write"' not in stdin:  # not a write tool: not the hook's business
        assert inside.exit_code == 0 and inside.output == "", inside.output
    elif inside.exit_code == 0:  # a write it cannot place: a deny decision, never an allow
        assert '"permissionDecision": "deny"' in inside.output, inside.output
    else:
        assert inside.exit_code == 2 and "write blocked" in inside.output, inside.output


@pytest.mark.parametrize("stdin", HOOK_STDIN)
def test_subagent_stop_hook_with_bad_stdin_lets_go(git_repo: Path, stdin: str) -> None:
    _reset(git_repo, {})
    result = _cli(git_repo, "hook", "subagent-stop", stdin=stdin)
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output


@pytest.mark.parametrize(
    ("env", "expect"),
    [
        ({"GITRUN_RUN": RUN, "GITRUN_TASK": "nope"}, "has no task 'nope'"),
        ({"GITRUN_RUN": "../x", "GITRUN_TASK": "t1"}, "not a valid run id"),
        ({"GITRUN_RUN": "missing", "GITRUN_TASK": "t1"}, "no run 'missing'"),
        ({"GITRUN_TASK": "t1"}, "GITRUN_RUN is not"),
    ],
)
def test_pre_write_and_pre_commit_with_a_bad_task_context(
    git_repo: Path, env: dict[str, str], expect: str
) -> None:
    _reset(git_repo, {})
    write = '{"tool_name": "Write", "tool_input": {"file_path": "out/t1.json"}}'
    result = _cli(git_repo, "hook", "pre-write", stdin=write, env=env)
    assert result.exit_code in (0, 2) and "Traceback" not in result.output
    assert "deny" in result.output or "write blocked" in result.output, result.output
    result = _cli(git_repo, "hook", "pre-commit", env=env)
    assert result.exit_code == 1 and "commit rejected" in result.output, result.output
    assert expect in result.output


def test_hooks_with_a_broken_packet_block_in_a_task_context(git_repo: Path) -> None:
    _reset(git_repo, {PACKET: "[limits]\ntimeout = nan\n"})
    write = '{"tool_name": "Write", "tool_input": {"file_path": "out/t1.json"}}'
    env = {"GITRUN_RUN": RUN, "GITRUN_TASK": "t1"}
    result = _cli(git_repo, "hook", "pre-write", stdin=write, env=env)
    assert result.exit_code == 2 and "packet.toml" in result.output, result.output


# -- commands that write ------------------------------------------------------------------


def test_init_and_new_where_gitrun_cannot_write(git_repo: Path) -> None:
    build_tree(git_repo, {".gitrun": "a file where a directory belongs"})
    for args in (["init"], ["new", "x"]):
        result = _cli(git_repo, *args)
        _assert_clean_failure(result.output, result.exit_code, Case("w", r"cannot write \.gitrun"))


def test_new_over_an_existing_run_refuses(git_repo: Path) -> None:
    _reset(git_repo, {})
    result = _cli(git_repo, "new", RUN)
    _assert_clean_failure(result.output, result.exit_code, Case("w", r"already exists"))


# -- a handful as real processes ---------------------------------------------------------

PROCESS_CASES: list[tuple[dict[str, str | bytes | None], list[str], dict[str, str], str]] = [
    ({PACKET: "x = " + "[" * 3000 + "]" * 3000}, ["check", RUN], {}, "nested too deeply"),
    ({}, ["start", RUN], {"GITRUN_MODEL": " "}, "GITRUN_MODEL"),
    (
        {PACKET: tomli_w.dumps(merge(BASE_PACKET, {"limits": {"timeout": NAN}}))},
        ["start", RUN],
        {},
        "limits.timeout",
    ),
    ({TASKS: b"\xff"}, ["status", RUN], {}, "tasks.toml:1: is not UTF-8"),
    ({}, ["check", "../etc"], {}, "not a valid run id"),
]


@pytest.mark.parametrize(("files", "args", "env", "expect"), PROCESS_CASES)
def test_bad_input_as_a_real_process(
    git_repo: Path,
    files: dict[str, str | bytes | None],
    args: list[str],
    env: dict[str, str],
    expect: str,
) -> None:
    _reset(git_repo, files)
    proc = run_gitrun_call([*args], git_repo, env={**os.environ, **env}, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert proc.stderr.startswith("gitrun: error: ") and expect in proc.stderr, proc.stderr
