"""Leases of an external run: the tasks handed to an orchestrator and not yet collected.

Machine-local (``.git/gitrun/<run>/leases.json``), written by ``next`` and
``collect`` and read by them and by ``status``. A record that is not a
well-typed lease is skipped: it says nothing about any task.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

from gitrun.local import LocalPaths
from gitrun.tomlfile import write_atomic

LEASES_NAME = "leases.json"


@dataclass
class Lease:
    task: str
    attempt: int
    leased: float
    expires: float
    before: dict[str, str | None]
    agent: str | None = None

    @classmethod
    def from_json(cls, item: object) -> Lease | None:
        """The lease ``item`` describes, or None when it is not a complete, well-typed one."""
        if not isinstance(item, dict):
            return None
        task, attempt, before, agent = (item.get(k) for k in ("task", "attempt", "before", "agent"))
        times = [item.get("leased"), item.get("expires")]
        if not isinstance(task, str) or type(attempt) is not int:
            return None
        if not all(_finite(t) for t in times):
            return None
        if not isinstance(before, dict) or not all(
            isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in before.items()
        ):
            return None
        if agent is not None and not isinstance(agent, str):
            return None
        return cls(task, attempt, float(times[0]), float(times[1]), before, agent)  # type: ignore[arg-type]  # _finite checked them

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def read_leases(local: LocalPaths) -> dict[str, Lease]:
    try:
        data = json.loads((local.root / LEASES_NAME).read_text())
    except (OSError, ValueError):
        return {}
    leases = {}
    for item in data if isinstance(data, list) else []:
        lease = Lease.from_json(item)
        if lease is not None:
            leases[lease.task] = lease
    return leases


def write_leases(local: LocalPaths, leases: dict[str, Lease]) -> None:
    data = json.dumps([lease.to_json() for lease in leases.values()]).encode()
    write_atomic(local.root / LEASES_NAME, data, durable=False)
