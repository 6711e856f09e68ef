"""Machine-local state: one home for every path, typed and versioned records.

Every record round-trips; a missing or unknown version, a corrupt body or an ill-typed field is a
sentence naming the file (an error for the owner record of a live driver, a
warning for a cache, a lease or the tip record), never a traceback.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gitrun.engine.committer import Tip, read_tip
from gitrun.store.leases import Lease, LeaseFile, read_leases
from gitrun.store.local import HOME, LocalPaths, local_runs
from gitrun.store.lock import LiveAttempt, LiveState, Owner, RunBusy, read_owner, run_locked
from gitrun.store.records import Fields, RecordDamaged, load_record, write_record
from tests.helpers import commit_all, write_run
from tests.helpers import run_gitrun as _gitrun

if TYPE_CHECKING:
    from gitrun.store.records import Record

PACKAGE = Path(__file__).resolve().parents[2] / "gitrun"
SHA = "0123456789abcdef0123456789abcdef01234567"

OWNER = Owner(
    4242,
    "host-a",
    1000.5,
    1002.25,
    LiveState(2, 4, 5.0, canary=["t1"], running=[LiveAttempt("t1", 1, 8.5, 9.5)]),
    create_time=999.75,
    cmdline=["python3", "-m", "gitrun", "resume", "r"],
)
LEASES = {
    "t1": Lease("t1", 1, 10.0, 70.0, {"out/t1.json": None}),
    "t2": Lease("t2", 3, 11.5, 71.5, {"out/t2.json": "ab" * 20, "out/t2.md": None}),
}


@dataclass(frozen=True)
class Case:
    """One state file: where it lives, a record of it, its reader and what
    the reader returns for that record, and whether damage is only skipped."""

    name: str
    path: Callable[[LocalPaths], Path]
    record: Record
    read: Callable[[LocalPaths, Callable[[str], None]], object]
    expected: object
    skips: bool


CASES = [
    Case(
        "owner",
        lambda local: local.owner,
        OWNER,
        lambda local, warn: read_owner(local),
        OWNER,
        skips=False,
    ),
    Case(
        "leases",
        lambda local: local.leases,
        LeaseFile(LEASES),
        lambda local, warn: read_leases(local, warn),
        LEASES,
        skips=True,
    ),
    Case(
        "tip",
        lambda local: local.tip,
        Tip(SHA),
        lambda local, warn: read_tip(local, warn),
        SHA,
        skips=True,
    ),
]
IDS = [case.name for case in CASES]
NOTHING: dict[str, object] = {"owner": None, "leases": {}, "tip": None}


@pytest.fixture
def local(tmp_path: Path) -> LocalPaths:
    paths = LocalPaths.under(tmp_path / ".git", "r")
    paths.root.mkdir(parents=True)
    return paths


def _no_warning(message: str) -> None:
    raise AssertionError(f"unexpected warning: {message}")


def _read_damaged(case: Case, local: LocalPaths) -> str:
    """Read a damaged file the way its reader does; the one sentence the user sees."""
    warnings: list[str] = []
    if case.skips:
        assert case.read(local, warnings.append) == NOTHING[case.name]
        assert len(warnings) == 1, warnings
        said = warnings[0]
    else:
        with pytest.raises(RecordDamaged) as info:
            case.read(local, warnings.append)
        assert not warnings
        said = str(info.value)
    assert str(case.path(local)) in said and "\n" not in said, said
    return said


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_record_round_trips(case: Case, local: LocalPaths) -> None:
    data = case.record.to_json()
    assert data["v"] == 1
    decoded = type(case.record).from_json(Fields(json.loads(json.dumps(data))))  # type: ignore[attr-defined]  # each record class here has one
    assert decoded == case.record
    write_record(case.path(local), case.record)
    assert case.read(local, _no_warning) == case.expected
    assert json.loads(case.path(local).read_text()) == data


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_missing_file_is_no_record(case: Case, local: LocalPaths) -> None:
    assert case.read(local, _no_warning) == NOTHING[case.name]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_file_without_a_version_is_a_sentence(case: Case, local: LocalPaths) -> None:
    """Every record gitrun writes has a "v": one without is no record of its."""
    data = case.record.to_json()
    del data["v"]
    case.path(local).write_text(json.dumps(data))
    assert "has no format version" in _read_damaged(case, local)


@pytest.mark.parametrize("version", [2, 0, "1", None, 1.0])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_an_unknown_version_is_a_sentence(case: Case, local: LocalPaths, version: object) -> None:
    data = case.record.to_json()
    data["v"] = version
    case.path(local).write_text(json.dumps(data))
    said = _read_damaged(case, local)
    assert "format version" in said
    if version == 2:
        assert "written by a newer gitrun" in said


def _truncated(case: Case) -> list[bytes]:
    body = json.dumps(case.record.to_json()).encode()
    return [body[:cut] for cut in (1, len(body) // 3, len(body) // 2, len(body) - 1)]


CORRUPT = {
    "empty": b"",
    "blank": b" \n",
    "not utf-8": b'{"v": 1, "\xff\xfe": 2}',
    "nested too deep": b"[" * 100_000 + b"]" * 100_000,
    "a list": b"[1, 2]",
    "a string": b'"text"',
    "null": b"null",
    "garbage": b"not json at all",
}


@pytest.mark.parametrize("body", list(CORRUPT.values()), ids=list(CORRUPT))
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_corrupt_body_is_a_sentence(case: Case, local: LocalPaths, body: bytes) -> None:
    case.path(local).write_bytes(body)
    _read_damaged(case, local)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_truncated_file_is_a_sentence(case: Case, local: LocalPaths) -> None:
    for body in _truncated(case):
        case.path(local).write_bytes(body)
        said = _read_damaged(case, local)
        assert "not valid JSON" in said or "not a valid" in said, said


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_directory_in_place_of_the_file_is_a_sentence(case: Case, local: LocalPaths) -> None:
    case.path(local).mkdir()
    assert "is a directory, not a regular file" in _read_damaged(case, local)


WRONG_TYPES: dict[str, list[tuple[str, object]]] = {
    "owner": [
        ("pid", "4242"),
        ("pid", 4242.0),
        ("pid", None),
        ("host", 7),
        ("started", "yesterday"),
        ("heartbeat", True),
        ("heartbeat", None),
    ],
    "leases": [("leases", {"t1": {}}), ("leases", "t1"), ("leases", None)],
    "tip": [("commit", 7), ("commit", "HEAD"), ("commit", SHA[:12]), ("commit", None)],
}


@pytest.mark.parametrize(
    ("case", "field", "value"),
    [(case, field, value) for case in CASES for field, value in WRONG_TYPES[case.name]],
    ids=[
        f"{case.name}-{field}={value!r}"
        for case in CASES
        for field, value in WRONG_TYPES[case.name]
    ],
)
def test_a_field_of_the_wrong_type_is_a_sentence_naming_it(
    case: Case, field: str, value: object, local: LocalPaths
) -> None:
    data = case.record.to_json()
    data[field] = value
    case.path(local).write_text(json.dumps(data))
    said = _read_damaged(case, local)
    assert f"field {field!r}" in said, said


@pytest.mark.parametrize("field", ["pid", "host", "started", "heartbeat"])
def test_an_owner_record_without_a_required_field_is_a_sentence(
    field: str, local: LocalPaths
) -> None:
    data = OWNER.to_json()
    del data[field]
    local.owner.write_text(json.dumps(data))
    with pytest.raises(RecordDamaged, match=f"field '{field}' is missing"):
        read_owner(local)


def test_what_only_informs_in_an_owner_record_is_read_as_absent(local: LocalPaths) -> None:
    data: dict[str, Any] = OWNER.to_json()
    data.update(state=["not", "a", "table"], create_time="early", cmdline=[1, 2])
    local.owner.write_text(json.dumps(data))
    owner = read_owner(local)
    assert owner is not None
    assert (owner.state, owner.create_time, owner.cmdline) == (LiveState(), None, None)
    assert (owner.pid, owner.host) == (OWNER.pid, OWNER.host)


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("junk", "entry 1 is not a JSON object"),
        ({"task": "t9"}, "field 'attempt' is missing"),
        ({**LEASES["t1"].to_json(), "task": "t9", "attempt": "1"}, "'attempt' is not a whole"),
        ({**LEASES["t1"].to_json(), "task": "t9", "expires": float("nan")}, "'expires' is not a"),
        ({**LEASES["t1"].to_json(), "task": "t9", "before": {"a": 1}}, "'before' maps a path"),
    ],
)
def test_a_damaged_lease_is_skipped_the_others_kept(
    local: LocalPaths, bad: object, why: str
) -> None:
    """A lease of the wrong shape says nothing about any task: skipped, with a warning."""
    entries = [bad, *(lease.to_json() for lease in LEASES.values())]
    local.leases.write_text(json.dumps({"v": 1, "leases": entries}))
    warnings: list[str] = []
    assert read_leases(local, warnings.append) == LEASES
    [said] = warnings
    assert str(local.leases) in said and "skipped 1 damaged lease" in said and why in said, said


def test_a_damaged_owner_record_makes_a_busy_run_say_so(git_repo: Path) -> None:
    local = LocalPaths.of(git_repo, "r")
    with run_locked(local, "r"):
        local.owner.write_text('{"v": 1, "pid": ')
        with pytest.raises(RunBusy) as info, run_locked(local, "r"):
            raise AssertionError("the lock is held")  # pragma: no cover
    said = str(info.value)
    assert "already being driven by another gitrun process" in said
    assert f"its owner record {local.owner} is not valid JSON" in said, said


def test_local_runs_lists_the_runs_with_local_state(git_repo: Path) -> None:
    assert local_runs(git_repo) == []
    for run in ("b", "a"):
        LocalPaths.of(git_repo, run).root.mkdir(parents=True)
    (git_repo / ".git" / HOME / "stray-file").write_text("")
    assert local_runs(git_repo) == ["a", "b"]


def test_a_retired_ledger_is_named_by_its_stamp(tmp_path: Path) -> None:
    assert LocalPaths(tmp_path).retired("ledger", 17).name == "ledger.17"


# -- what the user sees, from the real command line ---------------------------


def _one_task_run(repo: Path) -> None:
    write_run(repo, "r", [{"id": "t1", "outputs": ["out/t1.json"]}])
    commit_all(repo, "define r")


def _big_run(repo: Path) -> None:
    tasks = [{"id": f"t{i:05d}", "outputs": [f"out/t{i:05d}.json"]} for i in range(1500)]
    write_run(repo, "r", tasks)
    commit_all(repo, "define r")


def _no_traceback(out: subprocess.CompletedProcess[str]) -> str:
    said = out.stdout + out.stderr
    assert "Traceback" not in said and "internal error" not in said, said
    return said


@pytest.mark.parametrize("body", ['{"v": 1, "pid": ', '{"v": 9, "pid": 1}', '{"v": 1, "pid": "x"}'])
def test_status_of_a_live_run_with_a_damaged_owner_record_is_one_sentence(
    git_repo: Path, body: str
) -> None:
    _one_task_run(git_repo)
    local = LocalPaths.of(git_repo, "r")
    with run_locked(local, "r"):  # a live driver, as far as the child can tell
        local.owner.write_text(body)
        out = _gitrun(git_repo, "status", "r")
    _no_traceback(out)
    assert out.returncode == 1, out.stdout + out.stderr
    [line] = out.stderr.strip().splitlines()
    assert line.startswith(f"gitrun: error: {local.owner} "), line
    assert "gitrun resume r" in line, line


def test_watchdog_reports_a_damaged_owner_record_and_inspects_the_other_runs(
    git_repo: Path,
) -> None:
    _one_task_run(git_repo)
    write_run(git_repo, "good", [{"id": "t1", "outputs": ["out/g1.json"]}])
    commit_all(git_repo, "define good")
    local = LocalPaths.of(git_repo, "r")
    with run_locked(local, "r"):
        local.owner.write_text("[1, 2]")
        out = _gitrun(git_repo, "watchdog")
        killed = _gitrun(git_repo, "watchdog", "--kill")
    said = _no_traceback(out)
    assert out.returncode == 1, said
    assert re.search(rf"^r: damaged: {re.escape(str(local.owner))} holds a JSON list", said, re.M)
    assert re.search(r"^good: no driver; ok$", said, re.M), said
    assert "r: not stopped" in _no_traceback(killed), killed.stdout + killed.stderr


# -- one home for every path ---------------------------------------------------


def _local_names() -> list[str]:
    """The names of LocalPaths' files specific enough to grep for (``index``,
    ``tip`` or ``logs`` are common words: they are caught by ``.root /``)."""
    local = LocalPaths(Path("R"))
    names = []
    for attr, value in vars(LocalPaths).items():
        if isinstance(value, property) and getattr(local, attr).is_relative_to("R"):
            name = getattr(local, attr).relative_to("R").as_posix()
            if "." in name or "-" in name:
                names.append(name)
    return names


def hand_built_paths(source: str) -> list[tuple[int, str]]:
    """(line, what) for each place ``source`` builds a path under ``.git/gitrun`` by hand."""
    names = _local_names()
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            if isinstance(node.left, ast.Attribute) and node.left.attr == "root":
                found.append((node.lineno, f"{ast.unparse(node.left)} / ..."))
            left = ast.unparse(node.left)
            if (
                isinstance(node.right, ast.Constant)
                and node.right.value == HOME
                and ("git_dir" in left or "'.git'" in left)
            ):
                found.append((node.lineno, f'{left} / "{HOME}"'))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            for name in [*names, f".git/{HOME}"]:
                if name in node.value:
                    found.append((node.lineno, f'"{name}"'))
    return sorted(found)


def test_the_grep_finds_hand_built_paths() -> None:
    """The check below can fail: each way of building a local path by hand is found."""
    source = '''
def f(local, repo, run):
    """Mentions driver.json in prose, which is fine."""
    a = local.root / "governor.json"
    b = git_dir(repo) / "gitrun" / run
    c = repo / f".git/gitrun/{run}/tip"
    d = self.local.root / "anything"
    e = Path("x") / "leases.json"
    f = repo / ".git" / "gitrun"
    g = self.git_dir / "gitrun" / run
'''
    assert [line for line, _ in hand_built_paths(source)] == [4, 4, 5, 6, 7, 8, 9, 10]
    fine = "x = local.leases\ny = local.retired('ledger', 1)\nz = bin_dir / 'gitrun'\n"
    assert hand_built_paths(fine) == []


def test_no_module_but_local_builds_a_local_state_path() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "local.py":
            continue
        for line, what in hand_built_paths(path.read_text(encoding="utf-8")):
            offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {what}")
    assert not offenders, (
        "name these paths with a property of gitrun.store.local.LocalPaths instead: "
        + ", ".join(offenders)
    )


def test_every_record_reader_goes_through_load_record() -> None:
    """No state module parses a local JSON file by hand any more."""
    for name in (
        "store/lock.py",
        "store/leases.py",
        "store/dispatches.py",
        "engine/committer.py",
        "engine/external.py",
    ):
        source = (PACKAGE / name).read_text(encoding="utf-8")
        assert "json.loads" not in source, name
        assert "load_record(" in source, name


def test_load_record_never_lets_a_decoder_crash(local: LocalPaths) -> None:
    """A decoder that reads a field without Fields still gives a sentence."""
    local.owner.write_text('{"v": 1, "n": "x"}')

    def careless(data: Fields) -> int:
        return int(data.data["n"])

    with pytest.raises(RecordDamaged, match="is not a valid sample"):
        load_record(local.owner, careless, what="sample", fix="x")
