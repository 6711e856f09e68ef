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
LEDGER_NAME = "ledger.jsonl"
ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
BRANCH_PREFIX = "gitrun/"


def is_run_id(name: str) -> bool:
    return re.fullmatch(ID_PATTERN, name) is not None  # match() would let "r\n" through


def check_run_id(run_id: str) -> None:
    if not is_run_id(run_id):
        raise GitrunError(
            f"{run_id!r} is not a valid run id; use 1-64 lowercase letters, digits, '.', '_' "
            "or '-', starting with a letter or digit"
        )


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
