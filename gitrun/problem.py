"""One problem ``gitrun check`` found: a code, a sentence, the tasks and the path."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Problem:
    code: str
    message: str
    tasks: tuple[str, ...] = ()
    path: str | None = None

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["tasks"] = list(self.tasks)
        return data
