"""Stray and denied writes stay named after the run: in `status`, `status --json`
and the report, from the committed ledger, on a fresh clone too.

Each run is real: fake workers that write outside every owned path, write a
neighbour's output, and ask the real write hook (`gitrun hook pre-write`, a
child process, as an agent client asks it) for a write it denies.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gitrun.engine.strays import DENIED, STRAY, SUSPECT, VIOLATION, stray_writes
from tests.helpers import (
    commit_all,
    committed_ledger,
    fake_worker_run,
    git,
    gitrun_process,
    run_gitrun,
    wait_until,
)

DENIED_REASON = "gitrun task t04 may write only out/t04.json; notes/t04.md is not among them"


def _writes(data: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """``status --json``'s violations by (event, path)."""
    return {(str(v["event"]), str(v["path"])): v for v in data["violations"]}


def _report(repo: Path, out: Path) -> str:
    made = run_gitrun(repo, "report", "r", "-o", str(out))
    assert made.returncode == 0, made.stderr
    return out.read_text()


@pytest.mark.parametrize("isolation", ["none", "sandbox"])
def test_every_stray_and_denied_write_is_in_status_json_and_the_report_after_the_run(
    git_repo: Path, tmp_path: Path, isolation: str
) -> None:
    """t01 writes a second file beside its output, t03 writes outside every
    owned path, t04's write is denied by the hook. Unconfined, t01 writes
    t02's output, which is set aside as suspect at t02's dispatch; confined
    (where a neighbour's output is a read-only wall), it writes a name nobody
    owns, which never reaches the work tree (a stray), and t03's write fails
    there (nothing to report). After the run, and on a fresh clone of the
    pushed branch, every one is named with its task and path."""
    second = "out/t02.json" if isolation == "none" else "out/extra.json"
    spec = {
        "tasks": {"t01": "neighbour", "t03": "stray", "t04": "denied"},
        "neighbour_path": second,
    }
    packet = {"limits": {"canary": 0, "concurrency": 1, "timeout": "60s"}}
    fake_worker_run(git_repo, "r", 4, spec, packet, isolation=isolation)
    commit_all(git_repo, "define r")
    started = run_gitrun(git_repo, "start", "r")
    assert started.returncode == 0, started.stdout + started.stderr

    data = json.loads(run_gitrun(git_repo, "status", "r", "--json").stdout)
    assert data["counts"]["done"] == 4
    writes = _writes(data)
    denied = writes.pop((DENIED, "notes/t04.md"))
    assert (denied["task"], denied["attempt"], denied["tool"]) == ("t04", 1, "Write")
    assert denied["reason"] == DENIED_REASON
    if isolation == "none":
        suspect = writes.pop((SUSPECT, "out/t02.json"))
        assert suspect["task"] == "t02" and suspect["tasks"] == ["t01"]
        # The bytes t01 wrote are kept, where status says.
        aside = git_repo / suspect["quarantine"] / "out/t02.json"
        assert json.loads(aside.read_text())["task"] == "t01"
        violation = writes.pop((VIOLATION, "stray/t03.txt"))
        assert "t03" in violation["tasks"]
    else:
        stray = writes.pop((STRAY, "out/extra.json"))
        assert (stray["task"], stray["attempt"]) == ("t01", 1)
    assert writes == {}

    text = run_gitrun(git_repo, "status", "r").stdout
    said = started.stdout + "\n" + text
    assert (
        f"write denied: notes/t04.md: the hook denied t04 attempt 1 this write (Write): {DENIED_REASON}"
        in text
    )
    if isolation == "none":
        assert (
            "ownership violation: out/t02.json, an output of t02, appeared while other tasks ran (t01)"
            in text
        )
        assert "ownership violation: stray/t03.txt changed outside every owned path" in text
    else:
        assert (
            "ownership violation: out/extra.json written by t01 attempt 1, which does not own it: "
            "kept out of the work tree" in text
        )
    assert said.count("write denied: notes/t04.md") == 2  # start's summary says it too

    page = _report(git_repo, tmp_path / "r.html")
    assert "Write denied: notes/t04.md: the hook denied t04 attempt 1" in page
    assert f"Ownership violation: {second}" in page
    expected = 2 if isolation == "none" else 1
    assert f"<b>{expected}</b><span>ownership violations</span>" in page
    assert "<b>1</b><span>writes denied</span>" in page

    # The ledger is committed with the run: a fresh clone names them too.
    remote = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(git_repo, "push", "-q", str(remote), "main", "gitrun/r")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(remote), str(clone))
    there = json.loads(run_gitrun(clone, "status", "r", "--json").stdout)
    assert set(_writes(there)) == set(_writes(data))
    assert "write denied: notes/t04.md" in run_gitrun(clone, "status", "r").stdout
    assert "Write denied: notes/t04.md" in _report(clone, tmp_path / "clone.html")


def test_a_denied_write_of_a_running_attempt_is_in_status_while_it_runs(
    git_repo: Path,
) -> None:
    """The hook keeps a denial beside the attempt's log: status names it while
    the attempt still runs, and the ledger holds it, once, after the attempt
    ends (here: stopped with the driver)."""
    fake_worker_run(
        git_repo,
        "r",
        1,
        {"default": "denied_then_hang", "denied_path": "notes/t01.md"},
        {"limits": {"canary": 0, "timeout": "60s"}},
    )
    commit_all(git_repo, "define r")
    driver = gitrun_process(git_repo, "start", "r", capture=False)
    try:

        def denied_now() -> list[dict[str, Any]]:
            proc = run_gitrun(git_repo, "status", "r", "--json")
            return [v for v in json.loads(proc.stdout)["violations"] if v["event"] == DENIED]

        wait_until(driver, denied_now)
        [seen] = denied_now()
        assert (seen["task"], seen["attempt"], seen["path"]) == ("t01", 1, "notes/t01.md")
        stopped = run_gitrun(git_repo, "stop", "r")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    records = [r for r in committed_ledger(git_repo) if r.get("event") == DENIED]
    assert [(r["task"], r["attempt"], r["path"], r["times"]) for r in records] == [
        ("t01", 1, "notes/t01.md", 1)
    ]
    text = run_gitrun(git_repo, "status", "r").stdout
    assert text.count("write denied: notes/t01.md") == 1, text
    assert "last attempt 1 stopped" in text, text


def test_the_records_read_as_stray_writes() -> None:
    """Each record kind, and records that are not, read as a table."""
    records: list[dict[str, Any]] = [
        {"event": "violation", "path": "x.txt", "tasks": ["t1"], "at": "T"},
        {"event": "stray", "task": "t1", "attempt": 2, "paths": ["a", "b"], "at": "T"},
        {"event": "suspect", "task": "t2", "paths": ["out/t2.json"], "tasks": ["t1"], "aside": 0},
        {
            "event": "denied",
            "task": "t3",
            "attempt": 1,
            "path": "n.md",
            "tool": "Edit",
            "reason": "no",
            "times": 3,
            "at": "T",
        },
        {"event": "definition", "state": "changed", "path": "p.toml", "tasks": []},
        {"task": "t1", "attempt": 1, "outcome": "valid"},
        {"event": "stray", "task": "t1", "paths": "not a list"},
    ]
    got = [(w.kind, w.path, w.task, w.attempt, w.times, w.kept_as) for w in stray_writes(records)]
    assert got == [
        (VIOLATION, "x.txt", None, None, 1, None),
        (STRAY, "a", "t1", 2, 1, None),
        (STRAY, "b", "t1", 2, 1, None),
        (SUSPECT, "out/t2.json", "t2", None, 1, 0),
        (DENIED, "n.md", "t3", 1, 3, None),
    ]
