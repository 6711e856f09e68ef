"""Running a job again: deterministic re-runs finish, and only what changed runs.

Real repositories, real ``gitrun`` processes and a real shell worker whose
output depends only on its input (``tr`` of the input file), so a re-run makes
the very bytes the branch holds.
"""

from __future__ import annotations

import json
import random
import tomllib
from pathlib import Path

import pytest

from tests.helpers import (
    build_tree,
    commit_all,
    git,
    gitrun_ok,
    ledger_records,
    ran_since,
    run_gitrun,
    write_run,
)

# Deterministic: the output is the input upper-cased, as a JSON string. It
# also logs each task it ran, so a test knows what was dispatched.
WORKER = (
    'printf "%s\\n" "$GITRUN_TASK" >> "$RAN_LOG"; '
    'printf \'{"text": "%s"}\\n\' "$(tr a-z A-Z < "$GITRUN_INPUTS")" > "$GITRUN_OUTPUTS"'
)


def _run(repo: Path, run_id: str, count: int, rules: str = "upper-case it") -> Path:
    build_tree(repo, {f"docs/d{i}.txt": f"doc {i}\n" for i in range(1, count + 1)})
    tasks: list[dict[str, object]] = [
        {"id": f"t{i}", "inputs": [f"docs/d{i}.txt"], "outputs": [f"out/d{i}.json"]}
        for i in range(1, count + 1)
    ]
    log = repo.parent / "ran.log"
    write_run(
        repo,
        run_id,
        tasks,
        {
            "rules": {"text": rules},
            "executor": {
                "command": ["sh", "-c", WORKER],
                "env": {"RAN_LOG": str(log)},
            },
        },
    )
    commit_all(repo, f"define {run_id}")
    return log


def _status(repo: Path, run_id: str) -> dict[str, object]:
    proc = run_gitrun(repo, "status", run_id, "--json")
    assert proc.returncode == 0, proc.stderr
    status: dict[str, object] = json.loads(proc.stdout)
    return status


def test_a_deterministic_rerun_of_a_landed_run_finishes_with_every_task_done(
    git_repo: Path,
) -> None:
    """A second run with the same tasks (under another id), told to run them
    all, regenerates the very bytes the first landed: every attempt counts as
    written, each task is done, and the run ends with exit 0 (it halted with
    "unchanged since launch" before)."""
    log = _run(git_repo, "one", 3)
    gitrun_ok(git_repo, "start", "one", "-q")
    gitrun_ok(git_repo, "land", "one")
    assert ran_since(log) == ["t1", "t2", "t3"]
    # The same tasks in run two.
    (git_repo / ".gitrun/runs/two").mkdir()
    for name in ("packet.toml", "tasks.toml"):
        text = (git_repo / ".gitrun/runs/one" / name).read_text()
        (git_repo / ".gitrun/runs/two" / name).write_text(text.replace('"one"', '"two"'))
    commit_all(git_repo, "define two")
    out = gitrun_ok(git_repo, "start", "two", "--all")
    assert ran_since(log) == ["t1", "t2", "t3"]
    assert "unchanged since launch" not in out
    status = _status(git_repo, "two")
    assert status["counts"] == {
        "done": 3,
        "up-to-date": 0,
        "pending": 0,
        "running": 0,
        "failed": 0,
    }
    gitrun_ok(git_repo, "land", "two")


def test_all_runs_every_task_again_and_they_end_done(git_repo: Path) -> None:
    log = _run(git_repo, "r", 3)
    gitrun_ok(git_repo, "start", "r", "-q")
    gitrun_ok(git_repo, "land", "r")
    ran_since(log)
    out = gitrun_ok(git_repo, "start", "r", "--all")
    assert ran_since(log) == ["t1", "t2", "t3"]
    assert "started again" in out
    assert _status(git_repo, "r")["counts"]["done"] == 3  # type: ignore[index]


def test_a_second_run_with_one_input_changed_runs_one_task(git_repo: Path) -> None:
    log = _run(git_repo, "r", 5)
    gitrun_ok(git_repo, "start", "r", "-q")
    gitrun_ok(git_repo, "land", "r")
    assert ran_since(log) == [f"t{i}" for i in range(1, 6)]
    # Nothing changed: check says so, and start runs nothing.
    assert "5 of 5 tasks are up to date, 0 will run" in gitrun_ok(git_repo, "check", "r")
    out = gitrun_ok(git_repo, "start", "r")
    assert ran_since(log) == []
    assert "5 of 5 tasks are up to date" in out
    status = _status(git_repo, "r")
    assert status["counts"]["up-to-date"] == 5  # type: ignore[index]
    gitrun_ok(git_repo, "land", "r")
    # One input edited (not even committed): that task alone runs.
    (git_repo / "docs/d3.txt").write_text("doc three\n")
    assert "4 of 5 tasks are up to date, 1 will run" in gitrun_ok(git_repo, "check", "r")
    gitrun_ok(git_repo, "start", "r", "-q")
    assert ran_since(log) == ["t3"]
    status = _status(git_repo, "r")
    assert status["counts"]["done"] == 1  # type: ignore[index]
    assert status["counts"]["up-to-date"] == 4  # type: ignore[index]
    assert json.loads((git_repo / "out/d3.json").read_text()) == {"text": "DOC THREE"}
    gitrun_ok(git_repo, "land", "r")
    # The rules edited: every task runs.
    packet = git_repo / ".gitrun/runs/r/packet.toml"
    packet.write_text(packet.read_text().replace("upper-case it", "upper-case it all"))
    commit_all(git_repo, "new rules")
    gitrun_ok(git_repo, "start", "r", "-q")
    assert ran_since(log) == [f"t{i}" for i in range(1, 6)]


def test_check_json_carries_the_up_to_date_and_will_run_counts(git_repo: Path) -> None:
    """`check --json` says what the text says: how many tasks are up to date
    and how many a start runs, the same numbers from the same proof."""
    _run(git_repo, "r", 3)
    fresh = json.loads(run_gitrun(git_repo, "check", "r", "--json").stdout)
    assert (fresh["ready"], fresh["tasks"], fresh["up_to_date"], fresh["will_run"]) == (
        True,
        3,
        0,
        3,
    )
    assert fresh["problems"] == []
    gitrun_ok(git_repo, "start", "r", "-q")
    gitrun_ok(git_repo, "land", "r")
    (git_repo / "docs/d2.txt").write_text("doc two\n")
    text = gitrun_ok(git_repo, "check", "r")
    assert "2 of 3 tasks are up to date, 1 will run" in text
    proc = run_gitrun(git_repo, "check", "r", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["tasks"], data["up_to_date"], data["will_run"]) == (3, 2, 1)
    assert data["summary"] in text
    # A run with problems is not proven, so nothing is counted as up to date.
    tasks = git_repo / ".gitrun/runs/r/tasks.toml"
    tasks.write_text(tasks.read_text() + '[[task]]\nid = "t4"\noutputs = ["out/d1.json"]\n')
    proc = run_gitrun(git_repo, "check", "r", "--json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["ready"] is False and data["problems"]
    assert (data["tasks"], data["up_to_date"], data["will_run"]) == (4, None, None)


def test_retry_forces_an_up_to_date_task(git_repo: Path) -> None:
    log = _run(git_repo, "r", 2)
    gitrun_ok(git_repo, "start", "r", "-q")
    gitrun_ok(git_repo, "land", "r")
    gitrun_ok(git_repo, "start", "r", "-q")
    ran_since(log)
    gitrun_ok(git_repo, "retry", "r", "t2")
    gitrun_ok(git_repo, "resume", "r", "-q")
    assert ran_since(log) == ["t2"]
    counts = _status(git_repo, "r")["counts"]
    assert counts["done"] == 1 and counts["up-to-date"] == 1  # type: ignore[index]


def test_all_is_refused_where_no_task_is_up_to_date(git_repo: Path) -> None:
    _run(git_repo, "r", 2)
    proc = run_gitrun(git_repo, "start", "r", "--all")
    assert proc.returncode == 1
    assert "no task of run 'r' is up to date, so --all means nothing here" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_started_run_not_landed_is_refused_with_the_way_on(git_repo: Path) -> None:
    _run(git_repo, "r", 1)
    gitrun_ok(git_repo, "start", "r", "-q")
    proc = run_gitrun(git_repo, "start", "r")
    assert proc.returncode == 1
    assert "`gitrun resume r`" in proc.stderr and "`gitrun land r`" in proc.stderr


@pytest.mark.parametrize(
    "damage",
    [
        lambda r: {**r, "made_from": "not a digest"},
        lambda r: {**r, "made_from": {"definition": "0" * 64, "inputs": 7}},
        lambda r: {**r, "made": ["out/d1.json"]},
        lambda r: {**r, "made": {"out/d1.json": "f" * 40}},  # a blob that is not there
        lambda r: {**r, "v": 99},  # a newer format
    ],
)
def test_a_damaged_provenance_record_makes_the_task_run(git_repo: Path, damage: object) -> None:
    log = _run(git_repo, "r", 2)
    gitrun_ok(git_repo, "start", "r", "-q")
    gitrun_ok(git_repo, "land", "r")
    ran_since(log)
    git(git_repo, "branch", "-D", "-q", "gitrun/r")  # its copy of the ledger is whole
    chunks = sorted((git_repo / ".gitrun/runs/r/ledger").rglob("*.jsonl"))
    for chunk in chunks:
        lines = []
        for line in chunk.read_text().splitlines():
            record = json.loads(line)
            if record.get("task") == "t1" and record.get("outcome") == "valid":
                record = damage(record)  # type: ignore[operator]
            lines.append(json.dumps(record))
        chunk.write_text("\n".join(lines) + "\n")
    commit_all(git_repo, "a damaged ledger")
    gitrun_ok(git_repo, "start", "r", "-q")
    assert ran_since(log) == ["t1"]


def test_attempt_records_keep_what_outputs_were_made_from(git_repo: Path) -> None:
    _run(git_repo, "r", 1)
    gitrun_ok(git_repo, "start", "r", "-q")
    valid = [r for r in ledger_records(git_repo) if r.get("outcome") == "valid"]
    assert len(valid) == 1
    made_from = valid[0]["made_from"]
    assert isinstance(made_from, dict) and set(made_from) == {"definition", "inputs"}
    blob = git(git_repo, "rev-parse", "gitrun/r:out/d1.json").strip()
    assert valid[0]["made"] == {"out/d1.json": blob}
    body = git(git_repo, "log", "-1", "--format=%B", "gitrun/r")
    said = f"Gitrun-Made-From: t1 definition={made_from['definition'][:16]} "
    assert said + f"inputs={made_from['inputs'][:16]}" in body


REVIEW = (
    'printf "%s\\n" "$GITRUN_TASK" >> "$RAN_LOG"; '
    'printf \'{"review": %s}\\n\' "$(wc -c < "$GITRUN_INPUTS")" > "$GITRUN_OUTPUTS"'
)


@pytest.mark.parametrize("seed", [1, 2])
def test_exactly_the_tasks_an_edit_affects_run_again(git_repo: Path, seed: int) -> None:
    """Random edits between rounds (inputs, committed or not; task entries;
    the packet's rules) and a second stage reading the first's outputs:
    each round runs exactly the tasks whose provenance changed, and the
    review tasks of the work tasks that ran."""
    from gitrun.commands.land.landing import land_run
    from gitrun.commands.session import start_run

    rng = random.Random(seed)
    count = 5
    log = _run(git_repo, "r", count)
    tasks: list[dict[str, object]] = [
        {"id": f"t{i}", "inputs": [f"docs/d{i}.txt"], "outputs": [f"out/d{i}.json"]}
        for i in range(1, count + 1)
    ]
    reviews: list[dict[str, object]] = [
        {
            "id": f"r{i}",
            "stage": "review",
            "inputs": [f"out/d{i}.json"],
            "outputs": [f"rev/{i}.json"],
        }
        for i in (1, 2)
    ]
    rules = "upper-case it"

    def define() -> None:
        write_run(
            git_repo,
            "r",
            tasks + reviews,
            {
                "rules": {"text": rules},
                "stages": [{"name": "work"}, {"name": "review"}],
                "executor": {
                    "preset": "shell",
                    "shell": f'case "$GITRUN_TASK" in r*) {REVIEW};; *) {WORKER};; esac',
                    "env": {"RAN_LOG": str(log)},
                },
            },
        )

    def round_runs() -> list[str]:
        outcome = start_run(git_repo, "r", lambda _line: None)
        assert outcome.exit_code == 0, outcome.status.to_json()
        land_run(git_repo, "r")
        return ran_since(log)

    define()
    commit_all(git_repo, "two stages")
    assert round_runs() == sorted(t["id"] for t in tasks + reviews)  # type: ignore[misc]
    for number in range(4):
        expected: set[str] = set()
        for i in rng.sample(range(1, count + 1), rng.randint(0, 2)):  # inputs
            (git_repo / f"docs/d{i}.txt").write_text(f"doc {i}, round {number}\n")
            expected.add(f"t{i}")
        for i in rng.sample(range(1, count + 1), rng.randint(0, 1)):  # entries
            tasks[i - 1]["note"] = f"note of round {number}"
            expected.add(f"t{i}")
        if rng.random() < 0.2:  # the rules: everything
            rules += "!"
            expected = {str(t["id"]) for t in tasks + reviews}
        expected |= {f"r{i}" for i in (1, 2) if f"t{i}" in expected}
        define()
        if rng.random() < 0.5 and git(git_repo, "status", "--porcelain"):
            commit_all(git_repo, f"round {number}")  # else the edits stay uncommitted
        assert round_runs() == sorted(expected), f"round {number}"


def test_every_field_of_a_task_is_in_its_definition_digest() -> None:
    """The digest lists a task's fields one by one: a field added to the
    schema must be added there too, or editing it would not rerun the task."""
    from gitrun.definition.schema import Task

    digested = {"id", "stage", "outputs", "inputs", "owns", "note", "bundle", "edits"}
    assert set(Task.model_fields) == digested, (
        "a new field of Task belongs in Provenance.definition (gitrun/definition/provenance.py)"
    )


@pytest.mark.parametrize(
    ("edits", "script", "reason"),
    [
        (False, "true", "was not written: it is the file that was there at launch, untouched"),
        (
            True,
            'cp "$GITRUN_OUTPUTS" "$GITRUN_OUTPUTS.new" && mv "$GITRUN_OUTPUTS.new" '
            '"$GITRUN_OUTPUTS"',
            "is unchanged since launch",
        ),
    ],
)
def test_a_worker_that_leaves_a_landed_output_as_it_was_is_not_done(
    git_repo: Path, edits: bool, script: str, reason: str
) -> None:
    """Run again (its executor changed, so nothing is up to date), a worker
    that does nothing to the output it finds is not done; one that rewrites
    it unchanged is not done either when the task declares it edits the
    file in place."""
    log = _run(git_repo, "r", 1)
    gitrun_ok(git_repo, "start", "r", "-q")
    gitrun_ok(git_repo, "land", "r")
    ran_since(log)
    tasks: list[dict[str, object]] = [
        {"id": "t1", "inputs": ["docs/d1.txt"], "outputs": ["out/d1.json"], "edits": edits}
    ]
    write_run(
        git_repo,
        "r",
        tasks,
        {"executor": {"preset": "shell", "shell": script}, "limits": {"max_attempts": 1}},
    )
    commit_all(git_repo, "a worker that changes nothing")
    proc = run_gitrun(git_repo, "start", "r")
    assert proc.returncode == 3, proc.stderr  # the canary used its one attempt
    status = _status(git_repo, "r")
    assert status["tasks"]["t1"]["status"] == "failed"  # type: ignore[index]
    assert status["tasks"]["t1"]["reason"] == f"out/d1.json: {reason}"  # type: ignore[index]


def _round(repo: Path, log: Path) -> list[str]:
    """Start the run, land it; the tasks that ran."""
    from gitrun.commands.land.landing import land_run
    from gitrun.commands.session import start_run

    outcome = start_run(repo, "r", lambda _line: None)
    assert outcome.exit_code == 0, outcome.status.to_json()
    land_run(repo, "r")
    return ran_since(log)


def test_a_symlinked_input_reruns_its_task_when_what_it_names_changes(git_repo: Path) -> None:
    log = _run(git_repo, "r", 1)
    tasks: list[dict[str, object]] = [
        {"id": "t1", "inputs": ["docs/link.txt"], "outputs": ["out/d1.json"]}
    ]
    packet = (git_repo / ".gitrun/runs/r/packet.toml").read_text()
    write_run(git_repo, "r", tasks)
    (git_repo / ".gitrun/runs/r/packet.toml").write_text(packet)
    build_tree(git_repo, {"real/a.txt": "one\n", "real/b.txt": "two\n"})
    (git_repo / "docs/link.txt").symlink_to("../real/a.txt")
    commit_all(git_repo, "a linked input")
    assert _round(git_repo, log) == ["t1"]
    (git_repo / "real/a.txt").write_text("one more\n")  # what it names changes
    assert _round(git_repo, log) == ["t1"]
    (git_repo / "docs/link.txt").unlink()
    (git_repo / "docs/link.txt").symlink_to("../real/b.txt")  # it names another file
    assert _round(git_repo, log) == ["t1"]
    assert json.loads((git_repo / "out/d1.json").read_text()) == {"text": "TWO"}
    assert _round(git_repo, log) == []


def test_an_edit_in_place_of_a_file_it_reads_is_up_to_date_next_round(git_repo: Path) -> None:
    """A task that edits the file it reads (edits = true) changed its own
    input: its own outputs are not part of what it was made from."""
    log = git_repo.parent / "ran.log"
    build_tree(git_repo, {"docs/a.md": "teh cat\n"})
    write_run(
        git_repo,
        "r",
        [{"id": "fix", "inputs": ["docs/a.md"], "outputs": [{"path": "docs/a.md", "edits": True}]}],
        {
            "executor": {
                "preset": "shell",
                "shell": 'echo "$GITRUN_TASK" >> "$RAN_LOG"; sed -i s/teh/the/g "$GITRUN_OUTPUTS"',
                "env": {"RAN_LOG": str(log)},
            }
        },
    )
    commit_all(git_repo, "a typo to fix")
    assert _round(git_repo, log) == ["fix"]
    assert (git_repo / "docs/a.md").read_text() == "the cat\n"
    assert _round(git_repo, log) == []


@pytest.mark.usefixtures("clis")
def test_readers_of_a_rerun_output_rerun_however_they_name_it(git_repo: Path) -> None:
    """A second stage reads the first's outputs as a directory, a glob and a
    path: one first-stage task rerun (its input changed, a new task, or a
    retry) reruns each reader, not only the one naming the file."""
    log = _run(git_repo, "r", 2)
    packet = tomllib.loads((git_repo / ".gitrun/runs/r/packet.toml").read_text())
    work: list[dict[str, object]] = [
        {"id": f"t{i}", "inputs": [f"docs/d{i}.txt"], "outputs": [f"out/d{i}.json"]} for i in (1, 2)
    ]
    readers: list[dict[str, object]] = [
        {"id": "dir", "stage": "sum", "inputs": ["out"], "outputs": ["sum/dir.json"]},
        {"id": "glob", "stage": "sum", "inputs": ["out/*.json"], "outputs": ["sum/glob.json"]},
        {"id": "one", "stage": "sum", "inputs": ["out/d1.json"], "outputs": ["sum/one.json"]},
    ]
    shell = packet["executor"]["command"][2].replace(
        '"$(tr a-z A-Z < "$GITRUN_INPUTS")"', '"$(printf %s "$GITRUN_INPUTS" | wc -l)"'
    )
    packet["executor"] = {"preset": "shell", "shell": shell, "env": packet["executor"]["env"]}
    packet["stages"] = [{"name": "work"}, {"name": "sum"}]

    def define(tasks: list[dict[str, object]]) -> None:
        write_run(git_repo, "r", tasks + readers, packet)
        commit_all(git_repo, "define")

    define(work)
    assert _round(git_repo, log) == ["dir", "glob", "one", "t1", "t2"]
    (git_repo / "docs/d1.txt").write_text("doc one, again\n")
    commit_all(git_repo, "t1's input")
    assert _round(git_repo, log) == ["dir", "glob", "one", "t1"]
    build_tree(git_repo, {"docs/d3.txt": "doc 3\n"})
    define([*work, {"id": "t3", "inputs": ["docs/d3.txt"], "outputs": ["out/d3.json"]}])
    assert _round(git_repo, log) == ["dir", "glob", "t3"]
    gitrun_ok(git_repo, "start", "r", "-q")  # everything up to date
    assert ran_since(log) == []
    said = gitrun_ok(git_repo, "retry", "r", "t2")
    assert "dir" in said and "glob" in said and "one" not in said
    gitrun_ok(git_repo, "resume", "r", "-q")
    assert ran_since(log) == ["dir", "glob", "t2"]
