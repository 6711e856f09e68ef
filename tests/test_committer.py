"""Committing to the run's branch with plumbing: exact bytes, compare-and-swap, recovery."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gitrun.committer import Committer, Landing, landing_message
from gitrun.errors import GitrunError
from gitrun.local import LocalPaths
from gitrun.outputs import OutputCheck
from tests.helpers import build_tree, git


def _committer(repo: Path) -> Committer:
    committer = Committer(repo, "r", LocalPaths.of(repo, "r"))
    committer.start_branch(git(repo, "rev-parse", "HEAD").strip(), {}, "start\n")
    return committer


def _land(committer: Committer, task: str, data: bytes) -> str:
    landing = Landing(task, 1, [OutputCheck(f"out/{task}.json", "valid", data=data)])
    return committer.commit([landing], {}, landing_message("r", [landing]))


def test_the_validated_bytes_are_committed_not_what_is_on_disk_now(git_repo: Path) -> None:
    committer = _committer(git_repo)
    build_tree(git_repo, {"out/t1.json": '{"changed": "after validation"}\n'})
    tip = _land(committer, "t1", b'{"validated": true}\n')
    assert git(git_repo, "show", f"{tip}:out/t1.json") == '{"validated": true}\n'
    # The work tree and the index are untouched.
    assert git(git_repo, "status", "--porcelain", "--untracked-files=all") == "?? out/t1.json\n"


def test_a_deleted_branch_is_named_with_its_last_tip_and_restorable(git_repo: Path) -> None:
    committer = _committer(git_repo)
    tip = _land(committer, "t1", b"{}\n")
    git(git_repo, "update-ref", "-d", "refs/heads/gitrun/r")  # the reflog goes with it
    with pytest.raises(GitrunError) as caught:
        _land(committer, "t2", b"{}\n")
    message = str(caught.value)
    assert "reflog" not in message
    command = re.search(r"`(git branch gitrun/r [0-9a-f]{40})`", message)
    assert command is not None and tip in command[1]
    git(git_repo, *command[1].split()[1:])
    assert git(git_repo, "rev-parse", "gitrun/r").strip() == tip
    _land(committer, "t2", b"{}\n")  # the run goes on


def test_an_output_that_vanished_after_validation_is_committed_from_its_bytes(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One file of a batch gone from disk between validation and commit must
    not fail the commit: the validated bytes are what is committed anyway."""
    committer = _committer(git_repo)
    build_tree(git_repo, {"out/t1.json": '{"a": 1}\n', "out/t2.json": '{"b": 2}\n'})
    landings = [
        Landing("t1", 1, [OutputCheck("out/t1.json", "valid", data=b'{"a": 1}\n')]),
        Landing("t2", 1, [OutputCheck("out/t2.json", "valid", data=b'{"b": 2}\n')]),
    ]
    import gitrun.git as gitmod

    real = gitmod.hash_files

    def vanish_then_hash(repo: Path, paths: list[str]) -> list[str]:
        (git_repo / "out/t2.json").unlink()  # gone between the look and the hash
        return real(repo, paths)

    monkeypatch.setattr(gitmod, "hash_files", vanish_then_hash)
    tip = committer.commit(landings, {}, landing_message("r", landings))
    assert git(git_repo, "show", f"{tip}:out/t2.json") == '{"b": 2}\n'
