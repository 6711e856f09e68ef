"""What a launch decides from the disk, and the ids it gives attempts."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from gitrun.commands.session import start_run
from tests.helpers import fake_worker_run, git, ledger_records, write_run


def quiet(_line: str) -> None:
    pass


def test_every_attempt_gets_an_id_of_its_own(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The id a worker's processes carry (GITRUN_ATTEMPT_ID): 32 hex digits
    as uuid4 gives, never the same twice, in one run or in two."""
    from gitrun.store import journal

    ids = []
    write = journal.Journal.write

    def noted(self: journal.Journal, entry: journal.JournalEntry) -> None:
        if not entry.end:  # a clean end removes the journal: its entries as written
            ids.append(entry.attempt_id)
        write(self, entry)

    monkeypatch.setattr(journal.Journal, "write", noted)
    runs = {"r": (4, {"tasks": {"t02": "invalid_then_write"}}), "s": (3, {"default": "write"})}
    for run, (count, spec) in runs.items():
        # one after the other: two runs that own the same paths are never defined at once
        fake_worker_run(git_repo, run, count, spec)
        assert start_run(git_repo, run, quiet).exit_code == 0
        shutil.rmtree(git_repo / "out")  # committed on gitrun/r: out of the next run's way
        # and so is its definition: a run started and not landed owns its paths
        shutil.rmtree(git_repo / ".gitrun" / "runs" / run)
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    started = 5 + 3  # t02 twice
    assert len(ids) == 2 * started  # each launch journaled ahead and once spawned
    assert len(set(ids)) == started


@pytest.mark.parametrize("left", ['{"early": 3}', "{broken"])
def test_an_output_another_worker_left_is_never_the_task_s_result(
    git_repo: Path, left: str
) -> None:
    """t1's worker also leaves t3's output behind: at t3's turn a valid one
    is set aside as suspect and an invalid one replaced; either way t3's
    own worker makes what is committed."""
    script = (
        'printf \'{"task": "%s"}\\n\' "$GITRUN_TASK" > "$GITRUN_OUTPUTS"; '
        f"if [ \"$GITRUN_TASK\" = t1 ]; then printf '{left}' > out/t3.json; fi"
    )
    tasks: list[dict[str, object]] = [
        {"id": f"t{n}", "outputs": [f"out/t{n}.json"]} for n in (1, 2, 3)
    ]
    packet = {
        "executor": {"preset": "shell", "shell": script, "isolation": "none"},
        "limits": {"concurrency": 1},
    }
    write_run(git_repo, "r", tasks, packet)
    outcome = start_run(git_repo, "r", quiet)
    assert outcome.exit_code == 0
    attempts = [r["task"] for r in ledger_records(git_repo) if "attempt" in r]
    assert attempts == ["t1", "t2", "t3"]
    assert git(git_repo, "show", "gitrun/r:out/t3.json") == '{"task": "t3"}\n'
