"""Landing into the checkouts git allows besides a plain branch: a sparse
checkout, whose cone the landing keeps as ``git merge`` does, and a detached
HEAD, which the landing names as such."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from gitrun.commands.land.landing import land_run
from gitrun.commands.session import start_run
from tests.helpers import fake_worker_run, git

quiet = lambda _line: None  # noqa: E731


@pytest.fixture
def finished(git_repo: Path) -> Path:
    fake_worker_run(git_repo, "r", 3, {})
    assert start_run(git_repo, "r", quiet).exit_code == 0
    return git_repo


def test_a_sparse_checkout_keeps_the_outputs_outside_its_cone_out(finished: Path) -> None:
    """As `git merge` does: committed, with the skip-worktree bit, not written."""
    git(finished, "sparse-checkout", "set", "--cone", "docs")
    shutil.rmtree(finished / "out")  # the workers' copies: a cone without out/ has none
    said = land_run(finished, "r")
    # The 3 outputs are outside; the run's definition and ledger are in the
    # work tree already (untracked copies), so they are not.
    assert re.fullmatch(
        r"run 'r' merged into the current branch \(\d+ files, 3 of them outside the sparse "
        r"checkout: committed, not written\)",
        said,
    ), said
    assert not (finished / "out").exists()
    assert git(finished, "ls-files", "-t", "out").split("\n")[:3] == [
        "S out/t01.json",
        "S out/t02.json",
        "S out/t03.json",
    ]
    assert git(finished, "status", "--porcelain", "--untracked-files=no").strip() == ""
    assert git(finished, "cat-file", "-t", "HEAD:out/t01.json").strip() == "blob"
    # Widened, the checkout gets the run's files from the index git was given.
    git(finished, "sparse-checkout", "disable")
    assert (finished / "out/t01.json").read_bytes() == git(
        finished, "cat-file", "blob", "HEAD:out/t01.json"
    ).encode()
    assert git(finished, "status", "--porcelain", "--untracked-files=no").strip() == ""


def test_outputs_inside_the_cone_are_written_as_before(finished: Path) -> None:
    git(finished, "sparse-checkout", "set", "--cone", "out")
    shutil.rmtree(finished / "out")
    land_run(finished, "r")
    assert sorted(p.name for p in (finished / "out").iterdir()) == [
        "t01.json",
        "t02.json",
        "t03.json",
    ]
    assert git(finished, "ls-files", "-t", "out").split("\n")[0] == "H out/t01.json"


def test_a_detached_head_is_named_as_such_and_gets_the_merge(finished: Path) -> None:
    """Git merges onto a detached HEAD, and so does a landing; it says where
    the merge went and how to keep it, not "the current branch"."""
    main = git(finished, "rev-parse", "HEAD").strip()
    git(finished, "switch", "-q", "--detach")
    said = land_run(finished, "r")
    assert "current branch" not in said
    assert re.fullmatch(
        r"run 'r' merged into the detached HEAD \(\d+ files\); no branch holds it: "
        r"`git switch -c <branch>` keeps it",
        said,
    ), said
    assert git(finished, "rev-parse", "HEAD^1").strip() == main
    assert git(finished, "rev-parse", "main").strip() == main  # no branch moved
    assert git(finished, "rev-parse", "--symbolic-full-name", "HEAD").strip() == "HEAD"
    assert land_run(finished, "r") == "run 'r' is already landed in the detached HEAD"
