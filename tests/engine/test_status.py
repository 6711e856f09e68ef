"""`gitrun status` remembers why: each task not done names what its last attempt
was (timed out, invalid, missing, stopped...), why, and where its outputs that
failed validation were set aside; in the text, the JSON and the report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gitrun.store import ledger
from tests.helpers import commit_all, fake_worker_run, run_gitrun


def test_each_task_not_done_says_its_last_attempt_s_kind_reason_and_quarantine(
    git_repo: Path, tmp_path: Path
) -> None:
    """t01 hangs past its timeout, t02 writes broken JSON, t03 writes nothing;
    each has one attempt. Status says which was which (not "missing" for all),
    and where t02's broken bytes are."""
    spec = {"tasks": {"t01": "hang", "t02": "invalid", "t03": "nowrite"}}
    packet = {"limits": {"canary": 0, "max_attempts": 1, "timeout": "2s"}}
    fake_worker_run(git_repo, "r", 4, spec, packet, isolation="none")
    commit_all(git_repo, "define r")
    started = run_gitrun(git_repo, "start", "r")
    assert started.returncode == 1, started.stdout + started.stderr

    text = run_gitrun(git_repo, "status", "r").stdout
    lines = {line.split()[0]: line for line in text.splitlines() if re.match(r"  t0\d ", line)}
    assert (
        "last attempt 1 timed out after 2 s (limits.timeout): out/t01.json: does not exist"
        in (lines["t01"])
    )
    aside = ".git/gitrun/r/quarantine/t02/1/"
    assert re.search(
        r"last attempt 1 invalid: out/t02\.json: is not valid JSON .*; its outputs set aside in "
        + re.escape(aside),
        lines["t02"],
    ), lines["t02"]
    assert "last attempt 1 missing: out/t03.json: does not exist" in lines["t03"]
    assert (git_repo / aside / "out/t02.json").read_text() == "{not json"
    # start's summary says the same of each task failed for good.
    assert "t01 (1 attempt: timed out after 2 s (limits.timeout): out/t01.json" in started.stdout

    tasks = json.loads(run_gitrun(git_repo, "status", "r", "--json").stdout)["tasks"]
    assert [tasks[t].get("kind") for t in ("t01", "t02", "t03", "t04")] == [
        "timed out",
        "invalid",
        "missing",
        None,
    ]
    assert tasks["t02"]["quarantine"] == aside
    assert "quarantine" not in tasks["t01"] and "quarantine" not in tasks["t03"]

    page = tmp_path / "r.html"
    assert run_gitrun(git_repo, "report", "r", "-o", str(page)).returncode == 0
    html = page.read_text()
    assert "<td>timed out: out/t01.json: does not exist</td>" in html
    assert "<td>invalid: out/t02.json: is not valid JSON" in html
    assert "<td>missing: out/t03.json: does not exist</td>" in html


@pytest.mark.parametrize(
    ("record", "kind"),
    [
        ({"outcome": "valid", "timed_out": False}, "valid"),
        ({"outcome": "valid", "timed_out": True}, "valid"),  # it made it in time, just
        ({"outcome": "missing", "timed_out": True}, "timed out"),
        ({"outcome": "invalid", "timed_out": True}, "timed out"),
        ({"outcome": "missing", "timed_out": False}, "missing"),
        ({"outcome": "invalid"}, "invalid"),
        ({"outcome": "throttled", "timed_out": False}, "throttled"),
        ({"outcome": "interrupted", "timed_out": False}, "stopped"),
        ({"outcome": "abandoned"}, "abandoned"),
        ({"outcome": "lost"}, "lost"),
        ({"outcome": "unstarted"}, "unstarted"),
    ],
)
def test_an_attempt_s_kind(record: dict[str, object], kind: str) -> None:
    assert ledger.attempt_kind(record) == kind


def test_a_run_the_spawn_budget_halted_says_so_not_that_it_stalled(git_repo: Path) -> None:
    """The spawn budget is not a recorded halt: it follows from the ledger and
    the limits, and holds every later `resume`. Status says the run is halted
    by it (and what lifts it), not that it stalled and `resume` goes on."""
    spec = {"default": "nowrite"}
    packet = {"limits": {"canary": 0, "max_attempts": 3, "max_spawns": 2, "concurrency": 1}}
    fake_worker_run(git_repo, "r", 2, spec, packet, isolation="none")
    commit_all(git_repo, "define r")
    started = run_gitrun(git_repo, "start", "r")
    assert started.returncode == 3, started.stdout + started.stderr

    text = run_gitrun(git_repo, "status", "r").stdout
    assert "halted: retry storm: 2 spawns for 0 usable outputs" in text, text
    assert "raise limits.max_spawns" in text and "`gitrun retry r` lifts" not in text
    assert "stalled" not in text
    status = json.loads(run_gitrun(git_repo, "status", "r", "--json").stdout)
    assert status["halt"]["kind"] == "spawn budget" and status["stalled_since"] is None
    assert "stalled" not in run_gitrun(git_repo, "ls").stdout
