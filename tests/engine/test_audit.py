"""The stray-write audit sees what a worker with a shell can do besides its own outputs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gitrun.commands.session import resume_run, start_run
from gitrun.errors import GitrunError
from tests.helpers import build_tree, commit_all, git, ledger_records, wait_for, write_run

quiet = lambda _line: None  # noqa: E731


def _run(repo: Path, body: str, tasks: int = 1) -> None:
    """A run whose worker writes its outputs, after running ``body`` (Python)."""
    script = repo.parent / "worker.py"
    script.write_text(
        "import os, pathlib, subprocess\n"
        "task = os.environ['GITRUN_TASK']\n"
        f"{body}\n"
        "for out in os.environ['GITRUN_OUTPUTS'].splitlines():\n"
        "    pathlib.Path(out).parent.mkdir(parents=True, exist_ok=True)\n"
        '    pathlib.Path(out).write_text(\'{"task": "%s"}\\n\' % task)\n'
    )
    work = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, tasks + 1)]
    packet = {
        "executor": {"command": [sys.executable, str(script)], "isolation": "none"},
        "limits": {"canary": 0, "concurrency": 1, "timeout": "60s"},
    }
    write_run(repo, "r", work, packet)


def _violations(outcome: object) -> list[str]:
    return [v.path for v in outcome.violations]  # type: ignore[attr-defined]


def test_an_edit_of_the_definition_mid_run_is_noticed_never_committed_nor_run_unasked(
    git_repo: Path,
) -> None:
    """An edit of the packet while tasks run is the user's as a rule (a
    notice, not an ownership violation), but a worker could have written it:
    the driver goes on with and commits the definition it started with, and
    resume runs the edit only when asked (--take-edits)."""
    marker = git_repo.parent / "EVIL_RAN"
    evil = git_repo.parent / "evil.py"
    evil.write_text(f"import pathlib; pathlib.Path({str(marker)!r}).write_text('x')\n")
    _run(
        git_repo,
        "if task == 't1':\n"
        "    p = pathlib.Path('.gitrun/runs/r/packet.toml')\n"
        f"    p.write_text(p.read_text().replace('worker.py', {str(evil.name)!r}))",
        tasks=2,
    )
    said: list[str] = []
    outcome = start_run(git_repo, "r", said.append)
    assert _violations(outcome) == []
    [notice] = [line for line in said if line.startswith("notice: ")]
    assert ".gitrun/runs/r/packet.toml, the run's definition, was edited while tasks ran" in notice
    assert "`gitrun resume r --take-edits` takes the edit" in notice
    events = [r for r in ledger_records(git_repo) if r.get("event") == "definition"]
    assert [(e["path"], e["state"], e["tasks"]) for e in events] == [
        (".gitrun/runs/r/packet.toml", "changed", ["t1"])
    ]
    committed = git(git_repo, "show", "gitrun/r:.gitrun/runs/r/packet.toml")
    assert "evil.py" not in committed and "worker.py" in committed
    (git_repo / "out/t2.json").unlink()  # something left to do, so resume would launch
    git(git_repo, "update-ref", "refs/heads/gitrun/r", "gitrun/r~1")
    with pytest.raises(GitrunError, match=r"packet\.toml was edited while the run was driven"):
        resume_run(git_repo, "r", quiet)
    assert not marker.exists()
    restored = subprocess.run(
        ["git", "show", "gitrun/r:.gitrun/runs/r/packet.toml"],
        cwd=git_repo,
        capture_output=True,
        check=True,
    ).stdout
    (git_repo / ".gitrun/runs/r/packet.toml").write_bytes(restored)  # as the message says
    assert resume_run(git_repo, "r", quiet).exit_code == 0
    assert not marker.exists()
    # Now the lead edits the packet while no driver runs: that is taken as it is.
    packet = git_repo / ".gitrun/runs/r/packet.toml"
    packet.write_text(packet.read_text() + "# the lead's note\n")
    assert resume_run(git_repo, "r", quiet).exit_code == 0


def test_the_user_s_edit_mid_run_is_taken_when_asked(git_repo: Path) -> None:
    _run(
        git_repo,
        "if task == 't1':\n"
        "    p = pathlib.Path('.gitrun/runs/r/packet.toml')\n"
        "    p.write_text(p.read_text() + '# the user sharpened the rules\\n')",
        tasks=2,
    )
    assert start_run(git_repo, "r", quiet).exit_code == 0
    (git_repo / "out/t2.json").unlink()
    git(git_repo, "update-ref", "refs/heads/gitrun/r", "gitrun/r~1")
    assert resume_run(git_repo, "r", quiet, take_edits=True).exit_code == 0
    committed = git(git_repo, "show", "gitrun/r:.gitrun/runs/r/packet.toml")
    assert "# the user sharpened the rules" in committed
    states = [r["state"] for r in ledger_records(git_repo) if r.get("event") == "definition"]
    assert states == ["changed", "taken"]
    assert resume_run(git_repo, "r", quiet).exit_code == 0  # taken once, then as it is


def test_overwriting_a_users_uncommitted_edit_is_reported(git_repo: Path) -> None:
    build_tree(git_repo, {"notes.txt": "committed\n"})
    commit_all(git_repo)
    build_tree(git_repo, {"notes.txt": "my uncommitted work\n", "scratch.txt": "untracked\n"})
    _run(
        git_repo,
        "pathlib.Path('notes.txt').write_text('clobbered')\npathlib.Path('scratch.txt').unlink()",
    )
    outcome = start_run(git_repo, "r", quiet)
    assert sorted(_violations(outcome)) == ["notes.txt", "scratch.txt"]


def test_planting_a_hook_or_a_git_config_command_is_reported_and_not_run_by_gitrun(
    git_repo: Path,
) -> None:
    marker = git_repo.parent / "FSMONITOR_RAN"
    _run(
        git_repo,
        "pathlib.Path('.git/hooks/post-merge').write_text('#!/bin/sh\\ntouch HOOK_RAN\\n')\n"
        "os.chmod('.git/hooks/post-merge', 0o755)\n"
        f"subprocess.run(['git', 'config', 'core.fsmonitor', 'touch {marker}; false'])",
    )
    outcome = start_run(git_repo, "r", quiet)
    assert {".git/config", ".git/hooks/post-merge"} <= set(_violations(outcome))
    assert not marker.exists()  # gitrun's own git status never ran the planted command


def test_a_same_size_rewrite_with_its_mtime_restored_is_reported(git_repo: Path) -> None:
    build_tree(git_repo, {"notes.txt": "committed\n"})
    commit_all(git_repo)
    build_tree(git_repo, {"notes.txt": "my uncommitted work\n"})
    _run(
        git_repo,
        "info = os.stat('notes.txt')\n"
        "pathlib.Path('notes.txt').write_text('XX uncommitted work\\n')\n"
        "os.utime('notes.txt', ns=(info.st_atime_ns, info.st_mtime_ns))",
    )
    outcome = start_run(git_repo, "r", quiet)
    assert _violations(outcome) == ["notes.txt"]


@pytest.mark.parametrize("how", ["hard link", "copy"])
def test_a_secret_planted_as_a_ledger_chunk_is_never_committed(git_repo: Path, how: str) -> None:
    build_tree(git_repo, {".gitignore": ".env\n"})
    commit_all(git_repo)
    build_tree(git_repo, {".env": "API_TOKEN=sk-SECRET-123\n"})
    plant = "os.link" if how == "hard link" else "import shutil; shutil.copyfile"
    _run(
        git_repo,
        "if task == 't1':\n"
        "    os.makedirs('.gitrun/runs/r/ledger/0000', exist_ok=True)\n"
        f"    {plant}('.env', '.gitrun/runs/r/ledger/0000/000050.jsonl')",
        tasks=2,
    )
    with pytest.raises(GitrunError, match=r"000050\.jsonl (has another name|holds lines)"):
        start_run(git_repo, "r", quiet)
    assert "sk-SECRET" not in git(git_repo, "log", "-p", "--all")


def test_what_a_worker_leaves_behind_in_its_own_session_is_stopped_at_the_end(
    git_repo: Path,
) -> None:
    """Stopped when its attempt ends (its PID namespace or its cgroup, where
    the machine has either), or at the end of driving by its attempt's id."""
    started = git_repo.parent / "LEFTOVER_STARTED"
    marker = git_repo.parent / "LATE_WRITE"
    _run(
        git_repo,
        "import subprocess, time\n"
        f"subprocess.Popen(['sh', '-c', 'touch {started}; sleep 3; touch {marker}'],"
        " start_new_session=True)\n"
        f"while not os.path.exists({str(started)!r}):\n"
        "    time.sleep(0.01)\n",
    )
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 0
    # Found by its command line: confined, its pid is a PID namespace's own.
    wait_for(lambda: _running(str(marker)) == [], 10, what="the worker's leftover `sh` ended")
    # Only a process naming the marker writes it, and none is left: no need
    # to sit out the 3 s it would have taken.
    assert not marker.exists()


def _running(text: str) -> list[str]:
    """The pids whose command line holds ``text``."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and text.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


@pytest.mark.parametrize(
    ("body", "stray"),
    [
        ("os.makedirs('.git/info/.claude-sandbox-noreplace', exist_ok=True)", False),
        ("pathlib.Path('.git/info/.claude-sandbox-noreplace').write_text('x')", True),
        (
            "os.makedirs('.git/info/.claude-sandbox-noreplace', exist_ok=True)\n"
            "pathlib.Path('.git/info/.claude-sandbox-noreplace/payload').write_text('x')",
            True,
        ),
    ],
    ids=["the client's empty mark", "a file of its name", "a file inside it"],
)
def test_the_claude_sandbox_s_mark_is_no_violation_and_nothing_else_is_passed_over(
    git_repo: Path, body: str, stray: bool
) -> None:
    """Claude Code's Bash sandbox makes an empty .git/info/.claude-sandbox-noreplace
    at each start (seen with the real client: tests/realclient/test_real_claude.py)."""
    _run(git_repo, body)
    outcome = start_run(git_repo, "r", quiet)
    assert (".git/info/.claude-sandbox-noreplace" in _violations(outcome)) is stray


def test_a_neighbour_s_output_written_by_another_worker_is_set_aside_not_committed(
    git_repo: Path,
) -> None:
    """t1's worker also writes t2's output. That file appeared while t1 ran,
    not by an attempt of t2: it is set aside as suspect and t2 dispatched,
    so what is committed as t2's result is t2's own work."""
    script = git_repo.parent / "worker.py"
    script.write_text(
        "import os, pathlib\n"
        "task = os.environ['GITRUN_TASK']\n"
        "pathlib.Path('out').mkdir(exist_ok=True)\n"
        "pathlib.Path(f'out/{task}.json').write_text('{\"by\": \"%s\"}' % task)\n"
        "if task == 't1':\n"
        "    pathlib.Path('out/t2.json').write_text('{\"clobbered\": true}')\n"
    )
    tasks = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in (1, 2)]
    packet = {
        "executor": {"command": [sys.executable, str(script)], "isolation": "none"},
        "limits": {"canary": 0, "concurrency": 1},
    }
    write_run(git_repo, "r", tasks, packet)
    said: list[str] = []
    outcome = start_run(git_repo, "r", said.append)
    assert outcome.exit_code == 0
    assert git(git_repo, "show", "gitrun/r:out/t2.json") == '{"by": "t2"}'
    [line] = [s for s in said if "appeared while other tasks ran" in s]
    assert line.startswith("t2: out/t2.json appeared while other tasks ran (t1)"), line
    aside = list((git_repo / ".git/gitrun/r/quarantine/t2").rglob("t2.json"))
    assert [p.read_text() for p in aside] == ['{"clobbered": true}']
    [event] = [r for r in ledger_records(git_repo) if r.get("event") == "suspect"]
    assert event["task"] == "t2" and event["paths"] == ["out/t2.json"]
    valid = [r["task"] for r in ledger_records(git_repo) if r.get("outcome") == "valid"]
    assert sorted(valid) == ["t1", "t2"]


# Two runs side by side: each task waits for a file the other run writes, so
# each driver sees the other run's outputs and ledger appear while it runs.
SIDE_BY_SIDE_WORKER = """
wait_for() {
    i=0
    while [ ! -s "$1" ]; do
        i=$((i + 1)); [ "$i" -gt 600 ] && { echo "never saw $1"; exit 9; }; sleep 0.05
    done
}
case "$GITRUN_TASK" in
    b1) wait_for a/a1.json ;;
    a2) wait_for b/b1.json ;;
    b2) wait_for a/a2.json ;;
esac
if [ -n "$STRAY" ] && [ "$GITRUN_TASK" = "$STRAY" ]; then echo oops > stray.txt; fi
mkdir -p "$(dirname "$GITRUN_OUTPUTS")"
echo '{}' > "$GITRUN_OUTPUTS"
"""


def _side_by_side(repo: Path, stray: str = "") -> None:
    """Runs a (strict ownership) and b with disjoint outputs under a/ and b/;
    the worker of task ``stray`` also writes stray.txt, which no run owns."""
    for run_id, packet in (("a", {"ownership": {"strict": True}}), ("b", {})):
        tasks = [{"id": f"{run_id}{n}", "outputs": [f"{run_id}/{run_id}{n}.json"]} for n in (1, 2)]
        command = ["env", f"STRAY={stray}", "sh", "-c", SIDE_BY_SIDE_WORKER]
        packet = {
            "executor": {"command": command, "isolation": "none"},
            "limits": {"timeout": "60s"},
            **packet,
        }
        write_run(repo, run_id, tasks, packet)
    commit_all(repo, "define a and b")


def _drive_both(repo: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    """``gitrun start a`` and ``gitrun start b``, two real drivers at once."""
    from tests.helpers import gitrun_process

    drivers = {run_id: gitrun_process(repo, "start", run_id) for run_id in ("a", "b")}
    ended = {}
    try:
        for run_id, driver in drivers.items():
            out, err = driver.communicate(timeout=120)
            ended[run_id] = subprocess.CompletedProcess(driver.args, driver.returncode, out, err)
    finally:
        for driver in drivers.values():
            if driver.poll() is None:
                driver.kill()
                driver.wait()
    return ended


def _violation_paths(repo: Path, run_id: str) -> list[str]:
    from tests.helpers import committed_ledger

    records = ledger_records(repo, run_id)
    committed = committed_ledger(repo, f"gitrun/{run_id}", run_id)
    assert [r for r in committed if r.get("event") == "violation"] == [
        r for r in records if r.get("event") == "violation"
    ]
    return sorted(str(r["path"]) for r in records if r.get("event") == "violation")


def test_two_runs_with_disjoint_paths_driven_at_once_say_no_false_word(
    git_repo: Path, tmp_path: Path
) -> None:
    """Each driver sees the other run's outputs and ledger appear while it
    runs; neither is a stray write of its own tasks, so neither is reported,
    and the strict run does not halt."""
    import json

    from tests.helpers import run_gitrun

    _side_by_side(git_repo)
    ended = _drive_both(git_repo)
    for run_id, proc in ended.items():
        assert proc.returncode == 0, (run_id, proc.stdout, proc.stderr)
        assert "violation" not in proc.stdout + proc.stderr, (run_id, proc.stdout)
        assert _violation_paths(git_repo, run_id) == []
        status = run_gitrun(git_repo, "status", run_id, "--json")
        assert status.returncode == 0, status.stderr
        data = json.loads(status.stdout)
        assert data["violations"] == [] and data["halt"] is None
        assert data["counts"]["done"] == 2
        page = tmp_path / f"{run_id}.html"
        assert run_gitrun(git_repo, "report", run_id, "-o", str(page)).returncode == 0
        assert "Ownership violation" not in page.read_text()


def test_a_stray_write_beside_two_runs_still_is_reported(git_repo: Path) -> None:
    """A file outside every run's owned paths is a violation still: the run
    whose worker wrote it reports it, and nothing of the other run's."""
    _side_by_side(git_repo, stray="b2")
    ended = _drive_both(git_repo)
    assert ended["b"].returncode == 0, ended["b"].stdout + ended["b"].stderr
    assert _violation_paths(git_repo, "b") == ["stray.txt"]
    # Run a (strict) saw it appear too, while its own task a1 or a2 was out:
    # it says so, and halts, on that path alone.
    assert _violation_paths(git_repo, "a") in ([], ["stray.txt"])


def test_a_run_a_worker_defines_gives_its_stray_writes_no_cover(git_repo: Path) -> None:
    """Only a run that has started covers what it owns: a worker that writes
    a run definition owning notes.txt, then notes.txt, is reported for
    notes.txt (the definition it wrote is a run's file, which gitrun keeps)."""
    build_tree(git_repo, {"notes.txt": "committed\n"})
    commit_all(git_repo)
    _run(
        git_repo,
        "d = pathlib.Path('.gitrun/runs/cover')\n"
        "d.mkdir(parents=True)\n"
        "(d / 'packet.toml').write_text('[run]\\nid = \"cover\"\\n')\n"
        "(d / 'tasks.toml').write_text("
        '\'[[task]]\\nid = "c1"\\nowns = ["notes.txt"]\\noutputs = ["notes.txt"]\\n\')\n'
        "pathlib.Path('notes.txt').write_text('clobbered')",
    )
    outcome = start_run(git_repo, "r", quiet)
    assert _violations(outcome) == ["notes.txt"]
