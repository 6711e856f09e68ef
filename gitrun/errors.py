"""The errors gitrun shows to users.

Every error builds its whole user-facing sentence; the CLI prints it after
``gitrun: error:`` and picks the exit code. Nothing here knows about the CLI.
"""

from __future__ import annotations

from collections.abc import Sequence
from shlex import quote

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


class GitUnavailable(GitrunError):
    """git cannot serve gitrun at all: it is not installed, or it refuses the
    repository. Not a :class:`CommandError`: no caller that copes with one
    failed git command can go on without git."""

    DUBIOUS = "detected dubious ownership in repository at '"

    @classmethod
    def missing(cls) -> GitUnavailable:
        return cls(
            "git is not installed here (no `git` on PATH), and gitrun works through it; "
            "install git (2.38 or newer) or put it on PATH, then run the command again"
        )

    @classmethod
    def refusal(cls, output: str) -> GitUnavailable | None:
        """git's ownership refusal (``safe.directory``) in ``output``, if that is what it says."""
        at = output.find(cls.DUBIOUS)
        if at < 0:
            return None
        where = output[at + len(cls.DUBIOUS) :].split("'\n", 1)[0].rstrip("'\n")

        return cls(
            f"git refuses to work in {where}: it is owned by another user (git's "
            "safe.directory check); if you trust it, run `git config --global --add "
            f"safe.directory {quote(where)}`, then run the command again"
        )
