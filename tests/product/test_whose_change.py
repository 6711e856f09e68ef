"""Whose change it is: the user's edit of a running run's definition is a
notice, never the workers' ownership violation, and `check` on a started or
finished run does not call the run's own committed outputs dirty."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.helpers import commit_all, run_gitrun, write_run


def _external(repo: Path) -> None:
    tasks = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in (1, 2, 3)]
    write_run(repo, "e", tasks, {"executor": {"kind": "external"}, "limits": {"canary": 1}})
    commit_all(repo, "run e")


def test_editing_the_packet_of_a_running_external_run_is_a_notice(git_repo: Path) -> None:
    _external(git_repo)
    assert run_gitrun(git_repo, "start", "e").returncode == 0  # t1 handed out
    (git_repo / "out").mkdir(exist_ok=True)
    (git_repo / "out/t1.json").write_text("{}\n")
    packet = git_repo / ".gitrun/runs/e/packet.toml"
    packet.write_text(packet.read_text() + "# sharper instructions\n")
    collected = run_gitrun(git_repo, "collect", "e")
    said = collected.stdout + collected.stderr
    assert collected.returncode == 0, said
    assert "ownership violation" not in said
    assert (
        "notice: .gitrun/runs/e/packet.toml, the run's definition, was edited while tasks ran "
        "(t1)" in said
    )
    status = run_gitrun(git_repo, "status", "e").stdout
    assert "ownership violation" not in status
    # The next batch goes out, and the definition is committed as edited.
    assert run_gitrun(git_repo, "next", "e").returncode == 0
    shown = subprocess.run(
        ["git", "show", "gitrun/e:.gitrun/runs/e/packet.toml"],
        cwd=git_repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "# sharper instructions" in shown


def test_check_of_a_started_run_judges_its_outputs_against_its_branch(git_repo: Path) -> None:
    _external(git_repo)
    run_gitrun(git_repo, "start", "e")
    (git_repo / "out").mkdir(exist_ok=True)
    (git_repo / "out/t1.json").write_text("{}\n")
    assert run_gitrun(git_repo, "collect", "e").returncode == 0  # committed on gitrun/e
    checked = run_gitrun(git_repo, "check", "e")
    assert checked.returncode == 0 and "is ready" in checked.stdout, checked.stdout
    # The user's own change to a committed output is still in the way.
    (git_repo / "out/t1.json").write_text('{"edited": true}\n')
    checked = run_gitrun(git_repo, "check", "e")
    assert checked.returncode == 1
    assert "[dirty-owned] out/t1.json has uncommitted changes" in checked.stdout


def test_a_task_whose_lead_session_keeps_dying_is_abandoned_not_failed(git_repo: Path) -> None:
    """A subagent dies with its lead session; a fresh session's `resume`
    takes the run over. Three such deaths over one task with two attempts:
    each lease is abandoned with no attempt used, and the task still runs."""
    import json

    tasks = [{"id": "t1", "outputs": ["out/t1.json"]}]
    write_run(
        git_repo,
        "e",
        tasks,
        # The spawn budget (3 a task by default) counts every start, abandoned too.
        {
            "executor": {"kind": "external"},
            "limits": {"canary": 0, "max_attempts": 2, "max_spawns": 10},
        },
    )
    commit_all(git_repo, "run e")
    started = json.loads(run_gitrun(git_repo, "start", "e", "--json", "--full").stdout)
    assert [item["task"] for item in started["leased"]] == ["t1"]
    for death in range(3):  # the lead dies; a new one resumes
        resumed = run_gitrun(git_repo, "resume", "e")
        assert resumed.returncode == 0, resumed.stderr
        assert "abandoned: t1" in resumed.stdout, resumed.stdout
        assert "gitrun run e, task t1" in resumed.stdout, f"not handed out again ({death})"
    (git_repo / "out").mkdir(exist_ok=True)
    (git_repo / "out/t1.json").write_text("{}\n")
    collected = json.loads(run_gitrun(git_repo, "collect", "e", "--json", "--full").stdout)
    assert collected["done"] == ["t1"] and collected["failed"] == []
    status = json.loads(run_gitrun(git_repo, "status", "e", "--json").stdout)
    outcomes = [r["outcome"] for r in status["tasks"]["t1"]["records"]]
    assert outcomes == ["abandoned"] * 3 + ["valid"]
    # None of its two attempts used up (failures count), four handed out.
    assert (status["tasks"]["t1"]["attempts"], status["tasks"]["t1"]["last_attempt"]) == (0, 4)
