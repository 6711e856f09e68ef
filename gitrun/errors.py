"""The errors gitrun shows to users.

Every error builds its whole user-facing sentence; the CLI prints it after
``gitrun: error:`` and picks the exit code. Nothing here knows about the CLI.
"""

from __future__ import annotations

from collections.abc import Sequence

# How a run's command ends, in either dispatch mode: every task done, some
# task failed for good, halted (canary, environment fault, a budget, the halt
# policy, strict ownership).
EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_HALTED = 3


class GitrunError(Exception):
    """A failure the user can fix; ``str(error)`` is the sentence to show."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def lines(self) -> list[str]:
        return [self.message]


class UsageError(GitrunError):
    """The command line itself is wrong (exit code 2, like click's usage errors)."""

    exit_code = 2


class DefinitionError(GitrunError):
    """A run definition or configuration file is broken.

    Holds one sentence per problem (every broken field, not only the first),
    each naming the file, the line where it is known, the field and the fix.
    """

    def __init__(self, lines: Sequence[str], path: str | None = None) -> None:
        self._lines = list(lines)
        self.path = path
        super().__init__(self._lines[0] if len(self._lines) == 1 else "; ".join(self._lines))

    @property
    def lines(self) -> list[str]:
        return list(self._lines)


class CommandError(GitrunError):
    """A child process (git or another tool) failed where it must not."""

    def __init__(self, argv: Sequence[str], returncode: int, output: str) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.output = output
        shown = output.strip().splitlines()
        detail = f": {shown[-1]}" if shown else ""
        super().__init__(f"`{' '.join(self.argv)}` exited with status {returncode}{detail}")
