"""A budget gitrun cannot enforce is said once per run, not on every call:
in external mode each `next` and `collect` is a process of its
own, so what was said is remembered in the run's machine-local state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gitrun.store.local import LocalPaths
from tests.helpers import commit_all, git, user_env, write_run

COST = "limits.max_cost_usd cannot be enforced"
TOKENS = "limits.max_tokens cannot be enforced"


def _gitrun(repo: Path, *args: str) -> Any:
    from tests.realclient.clis import gitrun

    return gitrun(repo, user_env(), *args)


def _external_run(repo: Path, tasks: int = 8) -> None:
    table = [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in range(1, tasks + 1)]
    limits = {"canary": 0, "concurrency": 2, "max_cost_usd": 1.0}
    write_run(repo, "e", table, {"executor": {"kind": "external"}, "limits": limits})
    commit_all(repo, "run e")


def _work(repo: Path, batch: list[dict[str, Any]]) -> None:
    """The subagents write their outputs; the orchestrator writes no usage file."""
    for item in batch:
        out = repo / item["outputs"][0]
        out.parent.mkdir(exist_ok=True)
        out.write_text('{"ok": 1}')


def _said(proc: Any, text: str = COST) -> int:
    return int((proc.stdout + proc.stderr).count(text))


def _round(repo: Path) -> tuple[Any, Any]:
    """One `next` (its batch worked at once) and one `collect`."""
    batch = _gitrun(repo, "next", "e", "--json", "--full")
    assert batch.returncode == 0, batch.stdout + batch.stderr
    _work(repo, json.loads(batch.stdout)["leased"])
    collected = _gitrun(repo, "collect", "e")
    assert collected.returncode == 0, collected.stdout + collected.stderr
    return batch, collected


def test_next_and_collect_say_an_unenforceable_budget_once_per_run(git_repo: Path) -> None:
    _external_run(git_repo)
    first = _gitrun(git_repo, "start", "e", "--json", "--full")
    assert first.returncode == 0 and _said(first) == 0  # no attempt has ended yet
    _work(git_repo, json.loads(first.stdout)["leased"])
    assert _said(_gitrun(git_repo, "collect", "e")) == 0
    calls = [*_round(git_repo), *_round(git_repo)]
    said = [_said(proc) for proc in calls]
    assert said == [1, 0, 0, 0], said  # the first `next` after an attempt ended
    text = calls[0].stderr
    assert (
        "warning: limits.max_cost_usd cannot be enforced: the one attempt so far did not report a cost"
        in text
    )
    assert _said(_gitrun(git_repo, "status", "e")) == 0

    # A budget added is a new situation: its own warning, once; the cost's is not repeated.
    assert _gitrun(git_repo, "retry", "e", "--tokens", "100000").returncode == 0
    batch, collected = _round(git_repo)
    assert (_said(batch, TOKENS), _said(batch), _said(collected, TOKENS)) == (1, 0, 0)
    # A raised budget, still unenforceable, is said again, once.
    assert _gitrun(git_repo, "retry", "e", "--budget", "2").returncode == 0
    batch, collected = _round(git_repo)
    assert (_said(batch), _said(batch, TOKENS), _said(collected)) == (1, 0, 0)
    assert "none of the 7 attempts" in batch.stderr


def test_another_machine_and_a_lost_marker_say_it_again_never_an_error(
    git_repo: Path, tmp_path: Path
) -> None:
    _external_run(git_repo)
    first = _gitrun(git_repo, "start", "e", "--json", "--full")
    _work(git_repo, json.loads(first.stdout)["leased"])
    assert _gitrun(git_repo, "collect", "e").returncode == 0
    batch, _ = _round(git_repo)
    assert _said(batch) == 1

    # The same run on another machine: a clone with the branch, resumed there.
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(git_repo), str(clone))
    resumed = _gitrun(clone, "resume", "e", "--json", "--full")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert _said(resumed) == 1
    _work(clone, json.loads(resumed.stdout)["leased"])
    assert _said(_gitrun(clone, "collect", "e")) == 0
    batch, collected = _round(clone)
    assert (_said(batch), _said(collected)) == (0, 0)

    # Back here: a damaged, then a missing, marker only means it is said again.
    said = LocalPaths.of(git_repo, "e").budget_warnings
    assert said.is_file()
    for damage in ("{not json", None):
        if damage is None:
            said.unlink()
        else:
            said.write_text(damage)
        again = _gitrun(git_repo, "next", "e", "--json", "--full")
        assert again.returncode == 0, again.stdout + again.stderr
        assert _said(again) == 1 and again.stderr.count("warning") == 1, again.stderr
        _work(git_repo, json.loads(again.stdout)["leased"])
        assert _gitrun(git_repo, "collect", "e").returncode == 0
        assert _said(_gitrun(git_repo, "next", "e", "--json", "--full")) == 0
        assert _gitrun(git_repo, "collect", "e").returncode == 0
