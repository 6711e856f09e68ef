from __future__ import annotations

import json
import os
import signal
import stat
import sys
import tracemalloc
from pathlib import Path

import pytest

from gitrun.definition.load import RunDef, load_run
from gitrun.definition.outputs import (
    blob_id,
    check_task,
    prepare_outputs,
    quarantine,
    stat_mark,
)
from tests.helpers import build_tree, git, write_run


def _run(repo: Path, outputs: list[object], validators: dict[str, object] | None = None) -> RunDef:
    packet: dict[str, object] = {"validators": validators} if validators else {}
    write_run(repo, "r", [{"id": "t1", "outputs": outputs, "owns": ["out/**"]}], packet)
    return load_run(repo, "r", environ={})


def _state(
    repo: Path, outputs: list[object], files: dict[str, str | bytes], **kw: object
) -> tuple[str, str]:
    run = _run(repo, outputs, kw.get("validators"))  # type: ignore[arg-type]
    build_tree(repo, files)
    check = check_task(run, run.tasks[0], kw.get("before"))  # type: ignore[arg-type]
    return check.outcome, check.reason


def test_auto_validators_by_extension(git_repo: Path) -> None:
    files = {
        "out/a.json": '{"ok": 1}',
        "out/b.jsonl": '{"a": 1}\n\n{"b": 2}\n',
        "out/c.toml": "x = 1",
        "out/d.md": "# hi",
    }
    assert _state(git_repo, list(files), files) == ("valid", "")


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("out/a.json", "{broken", "is not valid JSON"),
        ("out/a.jsonl", '{"a": 1}\nnope\n', "line 2 is not valid JSON"),
        ("out/a.toml", "x = = 1", "is not valid TOML"),
        ("out/a.json", "", "is empty"),
        ("out/a.json", b"\xff\xfe", "is not UTF-8 text"),
    ],
)
def test_invalid_contents(git_repo: Path, name: str, content: str | bytes, reason: str) -> None:
    outcome, why = _state(git_repo, [name], {name: content})
    assert outcome == "invalid"
    assert reason in why and name in why


def test_missing_and_unchanged(git_repo: Path) -> None:
    assert _state(git_repo, ["out/a.json"], {})[0] == "missing"
    data = b'{"same": true}'
    outcome, why = _state(
        git_repo, ["out/a.json"], {"out/a.json": data}, before={"out/a.json": blob_id(data)}
    )
    assert (outcome, why) == ("missing", "out/a.json: is unchanged since launch")


def _launch_and_write(
    repo: Path, outputs: list[object], write: str, task: dict[str, object] | None = None
) -> tuple[str, str]:
    """An output there at launch, then what an attempt does to it (``write``):
    the outcome and reason of the check after."""
    packet: dict[str, object] = {}
    write_run(repo, "r", [{"id": "t1", "outputs": outputs, **(task or {})}], packet)
    run = load_run(repo, "r", environ={})
    path = repo / "out/a.json"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b'{"same": true}')
    before = prepare_outputs(run, run.tasks[0])
    if write == "rewrite":  # the same bytes, written again in place
        path.write_bytes(b'{"same": true}')
    elif write == "replace":  # the same bytes in a new file renamed over it
        (repo / "out/tmp").write_bytes(b'{"same": true}')
        os.replace(repo / "out/tmp", path)
    elif write == "change":
        path.write_bytes(b'{"other": true}')
    elif write == "touch":  # its times alone
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1))
    check = check_task(run, run.tasks[0], before)
    return check.outcome, check.reason


@pytest.mark.parametrize("write", ["rewrite", "replace", "change", "touch"])
def test_a_rewrite_counts_as_written_whatever_its_bytes(git_repo: Path, write: str) -> None:
    assert _launch_and_write(git_repo, ["out/a.json"], write)[0] == "valid"


def test_an_output_left_untouched_is_not_written(git_repo: Path) -> None:
    outcome, why = _launch_and_write(git_repo, ["out/a.json"], "nothing")
    assert outcome == "missing"
    assert why == "out/a.json: was not written: it is the file that was there at launch, untouched"


@pytest.mark.parametrize(
    ("outputs", "task"),
    [
        ([{"path": "out/a.json", "edits": True}], None),
        (["out/a.json"], {"edits": True}),
    ],
)
def test_an_in_place_edit_needs_changed_content(
    git_repo: Path, outputs: list[object], task: dict[str, object] | None
) -> None:
    for write in ("nothing", "rewrite", "replace", "touch"):
        assert _launch_and_write(git_repo, outputs, write, task) == (
            "missing",
            "out/a.json: is unchanged since launch",
        ), write
    assert _launch_and_write(git_repo, outputs, "change", task)[0] == "valid"


def test_symlinks_and_directories_are_not_outputs(git_repo: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere.json").write_text("{}")
    (git_repo / "out").mkdir()
    os.symlink(tmp_path / "elsewhere.json", git_repo / "out/link.json")
    (git_repo / "out/dir.json").mkdir()
    run = _run(git_repo, ["out/link.json", "out/dir.json"])
    check = check_task(run, run.tasks[0])
    assert [(o.state, o.reason) for o in check.outputs] == [
        ("invalid", "is a symlink, not a regular file"),
        ("invalid", "is a directory"),
    ]


def test_output_through_a_symlinked_directory_to_outside(git_repo: Path, tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside/a.json").write_text("{}")
    os.symlink(tmp_path / "outside", git_repo / "out")
    outcome, why = _state(git_repo, ["out/a.json"], {})
    assert outcome == "invalid" and "out is a symlink" in why


def test_declared_validators(git_repo: Path) -> None:
    schema = (
        '{"type": "object", "required": ["title"], "properties": {"title": {"type": "string"}}}'
    )
    build_tree(git_repo, {"schemas/s.json": schema})
    script = git_repo.parent / "check.py"
    script.write_text(
        "import sys\nsys.exit(0 if open(sys.argv[1]).read().startswith('ok') else 3)\n"
    )
    validators = {
        "titled": {"kind": "json_schema", "schema": "schemas/s.json"},
        "big": {"kind": "min_bytes", "min": 10},
        "hello": {"kind": "regex", "pattern": "^hello"},
        "script": {"kind": "command", "command": [sys.executable, str(script)]},
    }
    outputs = [
        {"path": "out/a.json", "validators": ["titled"]},
        {"path": "out/b.txt", "validators": ["big", "hello"]},
        {"path": "out/c.txt", "validators": ["script"]},
    ]
    good = {"out/a.json": '{"title": "x"}', "out/b.txt": "hello world", "out/c.txt": "ok"}
    assert _state(git_repo, outputs, good, validators=validators) == ("valid", "")
    bad = {"out/a.json": '{"title": 3}', "out/b.txt": "hello", "out/c.txt": "no"}
    outcome, why = _state(git_repo, outputs, bad, validators=validators)
    assert outcome == "invalid"
    assert "fails schema schemas/s.json at title: 3 is not of type 'string'" in why
    assert "has 5 bytes, fewer than 10" in why
    assert "(status 3)" in why


def test_a_schema_failure_names_every_error_up_to_five(git_repo: Path) -> None:
    """Each error with its place in the document, in the order of those places
    (the same every time), five at most and a count of the rest."""
    schema = {
        "type": "object",
        "required": ["author", "title"],
        "properties": {"n": {"type": "integer"}, "tags": {"items": {"type": "string"}}},
    }
    build_tree(git_repo, {"schemas/s.json": json.dumps(schema)})
    validators = {"titled": {"kind": "json_schema", "schema": "schemas/s.json"}}
    outputs = [{"path": "out/a.json", "validators": ["titled"]}]
    two = {"out/a.json": '{"author": "a", "title": "t", "n": "x", "tags": [1]}'}
    outcome, why = _state(git_repo, outputs, two, validators=validators)
    assert outcome == "invalid"
    assert why.endswith(
        "fails schema schemas/s.json at n: 'x' is not of type 'integer'; "
        "at tags/0: 1 is not of type 'string'"
    ), why
    six = {"out/a.json": '{"tags": [1, "a", 2, 3], "n": "x"}'}
    for _ in range(2):  # the same order every time
        outcome, why = _state(git_repo, outputs, six, validators=validators)
        assert outcome == "invalid"
        assert why.endswith(
            "fails schema schemas/s.json at (root): 'author' is a required property; "
            "at (root): 'title' is a required property; at n: 'x' is not of type 'integer'; "
            "at tags/0: 1 is not of type 'string'; at tags/2: 2 is not of type 'string'; "
            "and 1 more"
        ), why


def test_a_schema_that_is_a_fifo_is_reported_not_waited_on(git_repo: Path) -> None:
    (git_repo / "schemas").mkdir()
    os.mkfifo(git_repo / "schemas/s.json")
    validators = {"titled": {"kind": "json_schema", "schema": "schemas/s.json"}}
    outputs = [{"path": "out/a.json", "validators": ["titled"]}]
    signal.alarm(30)  # the old read waited for a writer for good
    try:
        outcome, why = _state(git_repo, outputs, {"out/a.json": "{}"}, validators=validators)
    finally:
        signal.alarm(0)
    assert outcome == "invalid"
    assert "schema schemas/s.json is unreadable" in why and "a FIFO" in why


def test_quarantine_keeps_paths_and_bytes(git_repo: Path, tmp_path: Path) -> None:
    run = _run(git_repo, ["out/sub/a.json"])
    build_tree(git_repo, {"out/sub/a.json": "{bad"})
    check = check_task(run, run.tasks[0])
    moved = quarantine(git_repo, tmp_path / "q", check.outputs)
    assert moved == ["out/sub/a.json"]
    assert (tmp_path / "q/out/sub/a.json").read_text() == "{bad"
    assert not (git_repo / "out/sub/a.json").exists()


def test_executable_bit_is_kept(git_repo: Path) -> None:
    run = _run(git_repo, ["out/run.sh"])
    build_tree(git_repo, {"out/run.sh": "#!/bin/sh\n"})
    os.chmod(git_repo / "out/run.sh", 0o755 | stat.S_IFREG)
    [output] = check_task(run, run.tasks[0]).outputs
    assert output.mode == "100755"


def test_blob_id_matches_git(git_repo: Path) -> None:
    path = git_repo / "blob.bin"
    path.write_bytes(b"some bytes\x00\n")
    assert blob_id(path.read_bytes()) == git(git_repo, "hash-object", str(path)).strip()


def test_a_parent_that_is_a_file_means_the_output_is_missing(git_repo: Path) -> None:
    outcome, why = _state(git_repo, ["out/sub/a.json"], {"out/sub": "a file"})
    assert (outcome, why) == ("missing", "out/sub/a.json: a parent is not a directory")


def test_a_fifo_at_an_output_path_is_refused_at_once(git_repo: Path) -> None:
    """Never opened for reading: a FIFO with no writer would block the driver."""
    run = _run(git_repo, ["out/a.json"])
    (git_repo / "out").mkdir()
    os.mkfifo(git_repo / "out/a.json")
    [output] = check_task(run, run.tasks[0]).outputs
    assert (output.state, output.reason) == ("invalid", "is not a regular file")


def test_a_big_size_limit_costs_no_big_buffer(git_repo: Path) -> None:
    """limits.max_output_bytes (256 MiB by default) bounds a read; it is no
    buffer size: checking a small output allocates about its size."""
    run = _run(git_repo, ["out/a.json", "out/b.json"])
    assert run.packet.limits.max_output_bytes >= 1 << 28
    build_tree(git_repo, {"out/a.json": '{"a": 1}', "out/b.json": "[" + "1," * 50_000 + "1]"})
    tracemalloc.start()
    try:
        check = check_task(run, run.tasks[0])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert check.outcome == "valid"
    assert [len(o.data or b"") for o in check.outputs] == [8, 100_003]
    assert peak < 4 << 20, f"checking two small outputs took {peak:,} bytes"


def test_an_output_that_grew_past_the_limit_while_read_is_refused(git_repo: Path) -> None:
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/a.txt"], "owns": ["out/**"]}],
        {"limits": {"max_output_bytes": 10}},
    )
    run = load_run(git_repo, "r", environ={})
    build_tree(git_repo, {"out/a.txt": "x" * 10})
    assert check_task(run, run.tasks[0]).outcome == "valid"
    build_tree(git_repo, {"out/a.txt": "x" * 11})
    [output] = check_task(run, run.tasks[0]).outputs
    assert output.state == "invalid" and "over limits.max_output_bytes = 10" in output.reason


def test_prepare_outputs_makes_directories_and_notes_what_was_there(
    git_repo: Path, tmp_path: Path
) -> None:
    outputs = ["new/dir/a.json", "out/old.json", "out/link.json", "linked/b.json"]
    run = _run(git_repo, outputs)
    build_tree(git_repo, {"out/old.json": '{"old": 1}'})
    (tmp_path / "target").mkdir()
    os.symlink(tmp_path / "target/x.json", git_repo / "out/link.json")
    os.symlink(tmp_path / "target", git_repo / "linked")
    before = prepare_outputs(run, run.tasks[0], aside=lambda: tmp_path / "aside")
    assert before == {
        "new/dir/a.json": None,
        "out/old.json": stat_mark(os.lstat(git_repo / "out/old.json")),
        "out/link.json": None,
        "linked/b.json": None,
    }
    assert (git_repo / "new/dir").is_dir()
    assert not os.path.lexists(git_repo / "out/link.json")  # moved aside, target untouched
    assert os.path.islink(tmp_path / "aside/out/link.json")
    assert list((tmp_path / "target").iterdir()) == []  # nothing made through a link
