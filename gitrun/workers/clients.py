"""How an agent CLI says that its environment, not its task, is at fault.

Each client has its own ways (its :class:`ClientSigns`, in its record in
:mod:`gitrun.workers.presets`): exit codes that mean the same for every task
(gemini exits 41 when it cannot authenticate), and a line it keeps printing
while it cannot reach its model (codex loops "Reconnecting... waiting for
network" forever; aider and gemini retry a refused connection for a minute).
An attempt that shows either is an environment fault at once: the run halts
instead of spending the next attempts on the same wall.

The signs belong to the program, not to the preset: a ``command`` that runs
``codex`` directly is judged the same way
(:func:`gitrun.workers.presets.client_signs`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from gitrun.visible import visible
from gitrun.workers.shells import shell_refusal

_RETRY = "then `gitrun retry` and `gitrun resume`"


@dataclass(frozen=True)
class ClientSigns:
    """How one client CLI says that its environment failed.

    ``exits``: exit statuses that mean the same for every task, each with
    what it means and the fix. ``unreachable``: one report that the model
    cannot be reached; ``reports`` of them among the last ``window`` lines
    of output (what the client prints around one retry, so: in a row, with
    no work between them) stop the attempt.
    """

    exits: Mapping[int, str] = field(default_factory=dict)
    unreachable: str = ""
    reports: int = 0
    window: int = 0
    fix: str = ""

    def exit_fault(self, program: str, status: int) -> str | None:
        """The sentence for an exit status that is an environment fault, else None."""
        meaning = self.exits.get(status)
        if meaning is None:
            return None
        return f"{program} exited {status}, {meaning}, {_RETRY}"

    def unreachable_fault(self, program: str, line: str) -> str:
        shown = visible(" ".join(line.split())[:120])
        return (
            f"{program} reported {self.reports} times in a row that it cannot reach its model "
            f"(`{shown}`) and was stopped; {self.fix}, {_RETRY}"
        )


def exit_fault(client: tuple[str, ClientSigns] | None, status: int, output: str) -> str | None:
    """Why an attempt that exited ``status`` after saying ``output`` failed
    for its environment, not its task, else None: its client's exit status
    that means the same for every task, or a shell that says it cannot run
    the program it was told to (gitrun.workers.shells), whatever the client."""
    if client is not None:
        said = client[1].exit_fault(client[0], status)
        if said is not None:
            return said
    refusal = shell_refusal(status, output)
    return f"{refusal.sentence}, {_RETRY}" if refusal is not None else None


class UnreachableWatch:
    """Reads a worker's output line by line; says when the client has reported
    ``reports`` times within its last ``window`` lines that it cannot reach
    its model. Lines are joined before matching, so a report the client
    wrapped over two lines still counts."""

    def __init__(self, program: str, signs: ClientSigns) -> None:
        self.program = program
        self.signs = signs
        self._pattern = re.compile(signs.unreachable)
        self._lines: list[str] = []
        self._partial = b""

    def feed(self, chunk: bytes) -> str | None:
        """Take output; the fault's sentence once the reports are in, else None."""
        data = self._partial + chunk
        *complete, self._partial = data.split(b"\n")
        self._partial = self._partial[-4096:]  # a line without an end is cut, not hoarded
        found = None
        for raw in complete:
            line = raw[:2000].decode(errors="replace").strip()  # reports are short
            if not line:
                continue
            self._lines.append(line)
            del self._lines[: -self.signs.window]
            text = " ".join(self._lines)
            reports = list(self._pattern.finditer(text))
            if len(reports) >= self.signs.reports:
                last = reports[-1]
                found = self.signs.unreachable_fault(
                    self.program, text[max(0, last.start() - 60) : last.end() + 20]
                )
        return found
