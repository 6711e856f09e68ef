"""The names every layer shares: the run's files and folders, its branch, run ids."""

from __future__ import annotations

import os
import re

from gitrun.errors import GitrunError

GITRUN_DIR = ".gitrun"
RUNS_DIR = ".gitrun/runs"
CONFIG_FILE = ".gitrun/config.toml"
PACKET_NAME = "packet.toml"
TASKS_NAME = "tasks.toml"
ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
BRANCH_PREFIX = "gitrun/"


def run_id_problem(name: str) -> str | None:
    """Why ``name`` cannot be a run id, or None when it can. Beyond the
    pattern, the rules git holds for the run's branch name ``gitrun/<id>``
    (``git check-ref-format``) that the pattern lets through: checked here, in
    code, not by a git process, as every branch listing asks it of every
    name (the tests hold the two to the same answers)."""
    if re.fullmatch(ID_PATTERN, name) is None:  # match() would let "r\n" through
        return (
            "use 1-64 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    for rule, breaks in (
        ("'..' inside", ".." in name),
        ("a name ending in '.lock'", name.endswith(".lock")),
        ("a name ending in '.'", name.endswith(".")),
    ):
        if breaks:
            return f"git refuses {rule} as a branch name, so gitrun/{name} could not exist"
    return None


def is_run_id(name: str) -> bool:
    return run_id_problem(name) is None


def check_run_id(run_id: str) -> None:
    problem = run_id_problem(run_id)
    if problem is not None:
        raise GitrunError(f"{run_id!r} is not a valid run id: {problem}; pick another id")


def run_ids(root: str) -> list[str]:
    """The runs defined in the work tree at ``root``: directories of
    ``.gitrun/runs`` holding a packet.toml."""
    runs = os.path.join(root, RUNS_DIR)
    try:
        names = os.listdir(runs)
    except OSError:
        return []
    return sorted(n for n in names if os.path.isfile(os.path.join(runs, n, PACKET_NAME)))


def branch_ref(run_id: str) -> str:
    return f"refs/heads/{BRANCH_PREFIX}{run_id}"
