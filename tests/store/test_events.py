"""The ledger's records are declared once, in gitrun.store.events, and read back as written.

A kind spelled as a string in a second module is how two readers of the
ledger come to disagree: every module compares and builds typed records.
Every kind written and read back is the same record, and a ledger as
today's writers wrote it reads and rewrites to the very same bytes.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from gitrun.store import events
from gitrun.store.events import (
    AttemptRecord,
    Budget,
    ConcurrencyChange,
    DefinitionEvent,
    Denied,
    Event,
    Halt,
    Lift,
    Outcome,
    Park,
    Record,
    Retry,
    Start,
    Stray,
    Suspect,
    Violation,
    read,
)
from gitrun.store.jsonlines import line_of, parse_lines
from gitrun.store.ledger import LedgerWriter, read_ledger
from gitrun.store.usage import Usage

PACKAGE = Path(__file__).resolve().parents[2] / "gitrun"
EVENTS = PACKAGE / "store/events.py"
KIND_WORDS = {str(k) for k in Event} | {str(o) for o in Outcome} | {events.TIMED_OUT}
# Words of other vocabularies that happen to be spelled like a kind, compared
# where they mean something else.
ELSEWHERE = {
    ("definition/messages.py", "missing"),  # pydantic's error type
    ("workers/shells.py", "missing"),  # what a shell's message means: its program is missing
    ("engine/external.py", "throttled"),  # what holds the governor (it names its own waits)
    ("engine/external.py", "budget"),
    ("engine/governor.py", "throttled"),
    ("engine/strays.py", "event"),  # status --json names the record kind of each stray write
    ("engine/committer.py", "definition"),  # a key of made_from, the provenance's digests
}


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [s for e in node.elts for s in _strings(e)]
    return []


def _spelled(tree: ast.Module) -> list[tuple[int, str]]:
    """Where a module spells a kind: compares a kind's word, declares one as a
    constant, or reads or writes a record's ``"event"`` or ``"outcome"`` by hand."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        words: list[str] = []
        if isinstance(node, ast.Compare):
            words = [w for side in (node.left, *node.comparators) for w in _strings(side)]
            words = [w for w in words if w in KIND_WORDS]
        elif isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Constant):
            words = [w for w in _strings(node.value) if w in KIND_WORDS]
        if isinstance(node, ast.Dict):
            keys = [w for k in node.keys if k is not None for w in _strings(k)]
            words += [w for w in keys if w in ("event", "outcome")]
        elif isinstance(node, ast.Subscript):
            words += [w for w in _strings(node.slice) if w in ("event", "outcome")]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop", "setdefault")
            and node.args
        ):
            words += [w for w in _strings(node.args[0]) if w in ("event", "outcome")]
        found += [(node.lineno, w) for w in words]  # type: ignore[attr-defined]
    return found


def test_no_module_but_events_spells_a_record_kind() -> None:
    spelled: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == EVENTS:
            continue
        name = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        spelled += [
            f"{name}:{line}: {word!r}"
            for line, word in _spelled(tree)
            if (name, word) not in ELSEWHERE
        ]
    assert spelled == []


def test_the_guard_sees_a_kind_spelled_by_hand() -> None:
    source = """
if record.get("event") == "halt": pass
VIOLATION = "violation"
x = {"event": kind}
y = r["outcome"] in ("valid", "missing")
"""
    words = [w for _, w in _spelled(ast.parse(source))]
    assert sorted(words) == sorted(
        ["event", "halt", "violation", "event", "outcome", "valid", "missing"]
    )


def _every_kind() -> list[Record]:
    usage = Usage(1200, 340, 10, 5, 0.0123, "sonnet")
    return [
        AttemptRecord("t1", 1, "work", 1764646115.606, 1764646115.614, Outcome.MISSING, 0),
        AttemptRecord(
            "t2",
            2,
            "review",
            1764646115.0,
            1764646125.5,
            Outcome.VALID,
            1,
            None,
            False,
            "",
            dispatch=events.EXTERNAL,
            concurrency=3,
            usage=usage,
            made_from={"definition": "a" * 64, "inputs": "b" * 64},
            made={"out/a.json": "c" * 40},
            throttles=2,
        ),
        AttemptRecord(
            "t3",
            1,
            "work",
            1.0,
            2.5,
            Outcome.THROTTLED,
            None,
            9,
            True,
            "out/x: missing",
            said=["it said", "rate limited"],
        ),
        Start("0" * 40, ["t4"], "2026-12-02T03:27:15.000+00:00"),
        Retry("t1", "2026-12-02T03:27:16.000+00:00"),
        Halt("canary", "the canary failed", "2026-12-02T03:27:17.000+00:00"),
        Lift("2026-12-02T03:27:18.000+00:00"),
        Park(
            "2026-12-02T04:00:00.000+00:00",
            "usage limit of claude",
            "2026-12-02T03:27:19.000+00:00",
        ),
        Budget(40.0, None, "2026-12-02T03:27:20.000+00:00"),
        Violation("PROGRESS.md", ["t1", "t2"], "2026-12-02T03:27:21.000+00:00"),
        DefinitionEvent("tasks.toml", events.CHANGED, ["t1"], "2026-12-02T03:27:22.000+00:00"),
        DefinitionEvent("tasks.toml", events.VERIFIED),
        Suspect("t5", ["out/t5.json"], ["t6"], 1, "2026-12-02T03:27:23.000+00:00"),
        Stray("t6", 1, ["out/t5.json"], "2026-12-02T03:27:24.000+00:00"),
        Denied("t6", 1, "out/t5.json", "Write", "not owned", "2026-12-02T03:27:25+00:00", 3),
        ConcurrencyChange(
            "claude/haiku", 3, 4, "throttled at 4: the ceiling found", "2026-12-02T03:27:26+00:00"
        ),
    ]


def test_every_kind_is_covered() -> None:
    kinds = {r.event for r in _every_kind() if r.event is not None}
    assert kinds == set(Event)
    assert set(events.READERS) == set(Event)


@pytest.mark.parametrize("record", _every_kind(), ids=lambda r: type(r).__name__)
def test_a_record_written_reads_back_the_same(tmp_path: Path, record: Record) -> None:
    writer = LedgerWriter(tmp_path)
    writer.write(record)
    writer.close()
    (line,) = read_ledger(tmp_path)
    assert read(line) == record
    assert line_of(read(line).to_json()) == line_of(record.to_json())  # type: ignore[union-attr]


# Lines as the writers before gitrun.store.events wrote them (keys sorted, no
# spaces), one of every kind, with an attempt record from before records had "v".
TODAY = """\
{"attempt":1,"duration":0.008,"ended":"2026-12-02T03:28:35.614+00:00","exit":0,"outcome":"missing","reason":"lines/a.txt: does not exist","signal":null,"stage":"work","started":"2026-12-02T03:28:35.606+00:00","task":"t0001","timed_out":false,"v":1}
{"attempt":2,"concurrency":2,"dispatch":"external","duration":0.25,"ended":"2026-12-02T03:28:36.000+00:00","exit":null,"made":{"out/b":"3b18e512dba79e4c8300dd08aeb37f8e728b8dad"},"made_from":{"definition":"aa","inputs":"bb"},"outcome":"valid","said":["x"],"signal":null,"stage":"work","started":"2026-12-02T03:28:35.750+00:00","task":"t0002","throttles":1,"timed_out":true,"usage":{"cache_read":0,"cache_write":0,"cost_usd":0.5,"input":10,"model":"m","output":2},"v":1}
{"attempt":1,"duration":1.5,"ended":"2026-12-02T03:28:37.500+00:00","exit":75,"outcome":"throttled","signal":null,"stage":"work","started":"2026-12-02T03:28:36.000+00:00","task":"t0003","timed_out":false}
{"at":"2026-12-02T03:27:15.000+00:00","base":"f91631c971","event":"start","up_to_date":["t0009"]}
{"at":"2026-12-02T03:27:16.000+00:00","event":"retry","task":"t0001"}
{"at":"2026-12-02T03:27:17.000+00:00","event":"halt","kind":"canary","message":"the canary failed"}
{"at":"2026-12-02T03:27:18.000+00:00","event":"lift"}
{"at":"2026-12-02T03:27:19.000+00:00","event":"park","reason":"usage limit of claude","until":"2026-12-02T04:00:00.000+00:00"}
{"at":"2026-12-02T03:27:20.000+00:00","event":"budget","max_cost_usd":40,"max_tokens":null}
{"at":"2026-12-02T03:27:21.000+00:00","event":"violation","path":"PROGRESS.md","tasks":["t0001"]}
{"at":"2026-12-02T03:27:22.000+00:00","event":"definition","path":"tasks.toml","state":"changed","tasks":[]}
{"event":"definition","path":"tasks.toml","state":"taken"}
{"aside":1,"at":"2026-12-02T03:27:23.000+00:00","event":"suspect","paths":["out/c"],"task":"t0004","tasks":["t0005"]}
{"at":"2026-12-02T03:27:24.000+00:00","attempt":1,"event":"stray","paths":["out/c"],"task":"t0005"}
{"at":"2026-12-02T03:27:25+00:00","attempt":1,"event":"denied","path":"out/c","reason":"not owned","task":"t0005","times":2,"tool":"Write"}
"""


def test_a_ledger_written_before_reads_as_its_records_and_writes_the_same_bytes() -> None:
    lines: list[dict[str, Any]] = parse_lines(TODAY)
    records = [read(line) for line in lines]
    assert [type(r).__name__ for r in records] == [
        "AttemptRecord",
        "AttemptRecord",
        "AttemptRecord",
        "Start",
        "Retry",
        "Halt",
        "Lift",
        "Park",
        "Budget",
        "Violation",
        "DefinitionEvent",
        "DefinitionEvent",
        "Suspect",
        "Stray",
        "Denied",
    ]
    rewritten = "".join(line_of(r.to_json()) for r in records if r is not None)
    # Only the attempt from before "v" gains it; every other line is as it was.
    assert rewritten == TODAY.replace('"timed_out":false}', '"timed_out":false,"v":1}')
    first = records[0]
    assert isinstance(first, AttemptRecord) and first.kind == Outcome.MISSING
    assert first.duration == 0.008 and first.reason == "lines/a.txt: does not exist"
    park = records[7]
    assert isinstance(park, Park) and park.until_epoch == 1796184000.0


def test_a_line_of_no_kind_this_gitrun_knows_reads_as_none() -> None:
    assert read({"event": "from-a-newer-gitrun", "at": "x"}) is None
    assert read({"note": "no task, no event"}) is None
    assert read({"event": "halt", "kind": 3}) is None  # a halt without its kind: none
    assert read({"event": "denied", "path": None}) is None  # a denial of no path


def test_status_of_a_hand_edited_ledger_says_no_negative_count(git_repo: Path) -> None:
    """Turns, concurrencies and ceilings edited below zero by hand are not
    shown as such: the turns count none, a change of no possible level is skipped."""
    import json

    from tests.helpers import commit_all, run_gitrun, write_run

    write_run(git_repo, "r", [{"id": "t1", "outputs": ["out/t1.json"]}])
    commit_all(git_repo, "run r")
    at = "2026-01-01T00:00:0{}.000+00:00"
    edited = [
        {"v": 1, "task": "t1", "attempt": 1, "stage": "work", "outcome": "throttled",
         "started": at.format(0), "ended": at.format(1), "conversation": "c"},
        {"v": 1, "task": "t1", "attempt": 2, "stage": "work", "outcome": "valid",
         "started": at.format(2), "ended": at.format(3), "resumed_turns": -7,
         "resumed_from": {"attempt": 1, "throttles": 0}},
        {"v": 1, "event": "concurrency", "bucket": "claude/x", "concurrency": -2,
         "ceiling": -1, "reason": "r", "at": at.format(3)},
        {"v": 1, "event": "concurrency", "bucket": "claude/y", "concurrency": 2,
         "ceiling": -1, "reason": "r", "at": at.format(3)},
    ]  # fmt: skip
    chunk = git_repo / ".gitrun/runs/r/ledger/0000/000001.jsonl"
    chunk.parent.mkdir(parents=True, exist_ok=True)
    chunk.write_text("".join(json.dumps(r) + "\n" for r in edited))
    shown = run_gitrun(git_repo, "status", "r", "--json")
    assert shown.returncode == 0, shown.stderr
    said = json.loads(shown.stdout)
    assert said["resumed"]["turns_not_redone"] == 0
    assert [(b["bucket"], b["ceiling"]) for b in said["buckets"]] == [("claude/y", None)]
    text = run_gitrun(git_repo, "status", "r").stdout
    assert "-7" not in text and "-2" not in text and "~-1" not in text
