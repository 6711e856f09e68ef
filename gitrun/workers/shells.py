"""What a shell says when it cannot run the program it was told to.

A command such as ``["sh", "-c", "tool \"$1\"", "sh", "{task}"]`` starts
(the shell is there), and then the shell exits 127 (the program is not
found) or 126 (found, but it cannot be executed) with a sentence of its own
naming the program. That is the same for every task: an environment fault,
said after the first attempt with the program and the fix, instead of
spending the next attempts (and the spawn budget) on the same wall.

The sentences are the shells' own, by exit status: dash (Debian's ``sh``)
says ``sh: 1: tool: not found``, bash ``bash: line 1: tool: command not
found``, zsh ``zsh:1: command not found: tool``, busybox, ksh and mksh
``sh: tool: not found``; coreutils' launchers (``env``, ``timeout``,
``nohup``, ...) say ``env: 'tool': No such file or directory``. The name
before the first colon is the shell's ``$0``, which a command may set to
anything, so the forms that carry a line number are known by their shape
alone; the forms without one (which other programs print too, for their own
files) count only when a known shell or launcher says them. A program that
exits 127 or 126 by itself is judged as before unless its last words are
one of these sentences.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import PurePath

from gitrun.visible import SAID_LINES, SAID_WIDTH, visible

NOT_FOUND = 127  # POSIX: the command was not found
NOT_EXECUTABLE = 126  # POSIX: found, but it could not be executed

_SHELLS = frozenset({"sh", "ash", "dash", "bash", "zsh", "ksh", "ksh93", "mksh", "busybox", "yash"})
_LAUNCHERS = frozenset(
    {"env", "nice", "nohup", "stdbuf", "timeout", "xargs", "chroot", "setsid", "ionice", "taskset"}
)

_WHO = r"(?P<who>[^:\n]+)"  # the shell's $0: "sh", "bash", a script's path, any name
_PROGRAM = r"(?P<program>.+?)"
_QUOTED = r"['‘`]?(?P<program>.+?)['’]?"  # coreutils quote the name, by locale


@dataclass(frozen=True)
class _Form:
    """One way a shell says it: the exit statuses it comes with, its shape,
    what it means (``missing``: not found; ``interpreter``: found, but not the
    interpreter its #! line names; ``refused``: found, but not executable, a
    directory or not a program), and whether any ``$0`` may say it (a form
    with a line number) or only a known shell or launcher."""

    statuses: tuple[int, ...]
    shape: str
    meaning: str
    any_who: bool

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(self.shape)


_REFUSED = r"(?:Permission denied|Exec format error|Is a directory|cannot execute.*)"
_FORMS = (
    # dash: "sh: 1: tool: not found" (also for a missing #! interpreter)
    _Form((NOT_FOUND,), rf"{_WHO}: \d+: {_PROGRAM}: not found", "missing", True),
    # bash 5.1+: "bash: line 1: tool: command not found"
    _Form((NOT_FOUND,), rf"{_WHO}: line \d+: {_PROGRAM}: command not found", "missing", True),
    _Form(
        (NOT_FOUND,), rf"{_WHO}: line \d+: {_PROGRAM}: No such file or directory", "missing", True
    ),
    _Form(
        (NOT_FOUND,),
        rf"{_WHO}: line \d+: {_PROGRAM}: cannot execute: required file not found",
        "interpreter",
        True,
    ),
    # bash before 5.1: "bash: ./tool: /usr/bin/perl: bad interpreter: No such file or directory"
    _Form(
        (NOT_FOUND, NOT_EXECUTABLE),
        rf"{_WHO}: (?:line \d+: )?{_PROGRAM}: [^:]+: bad interpreter: .*",
        "interpreter",
        True,
    ),
    # zsh: "zsh:1: command not found: tool"
    _Form(
        (NOT_FOUND,),
        rf"{_WHO}:\d+: (?:command not found|no such file or directory): {_PROGRAM}",
        "missing",
        True,
    ),
    _Form(
        (NOT_EXECUTABLE,),
        rf"{_WHO}:\d+: (?:permission denied|exec format error|is a directory): {_PROGRAM}",
        "refused",
        True,
    ),
    # dash ("sh: 1: ./tool: Permission denied") and bash ("... line 1: ...")
    _Form((NOT_EXECUTABLE,), rf"{_WHO}: (?:line )?\d+: {_PROGRAM}: {_REFUSED}", "refused", True),
    # Without a line number: busybox, ksh, mksh, bash before 5.1, zsh at a prompt,
    # coreutils' launchers ("env: 'tool': No such file or directory").
    _Form(
        (NOT_FOUND,),
        rf"{_WHO}: {_PROGRAM}: (?:command not found|(?:inaccessible or )?not found)",
        "missing",
        False,
    ),
    _Form((NOT_FOUND,), rf"{_WHO}: command not found: {_PROGRAM}", "missing", False),
    _Form(
        (NOT_FOUND,),
        rf"{_WHO}: (?:failed to (?:run command|execute) )?{_QUOTED}: No such file or directory",
        "missing",
        False,
    ),
    _Form(
        (NOT_EXECUTABLE,),
        rf"{_WHO}: (?:failed to (?:run command|execute) )?{_QUOTED}: {_REFUSED}",
        "refused",
        False,
    ),
)


@dataclass(frozen=True)
class ShellRefusal:
    """A shell (or launcher) that said it cannot run ``program``."""

    program: str
    status: int
    meaning: str  # missing, interpreter, refused
    line: str  # what it said, made visible
    speaker: str  # "the shell", or the launcher's name in backticks

    @property
    def sentence(self) -> str:
        """The fault and its fix, for the run's halt (its caller adds how to
        continue)."""
        shown = f"`{self.program}`"
        said = f"(exit {self.status}, `{self.line}`)"
        if self.meaning == "missing":
            return (
                f"{self.speaker} cannot find the program {shown} {said}; install it or put it "
                "on PATH (or fix [executor] command)"
            )
        if self.meaning == "interpreter":
            return (
                f"{self.speaker} cannot run {shown}: the interpreter its #! line names is not "
                f"there {said}; install it or fix that line"
            )
        return (
            f"{self.speaker} cannot execute {shown} {said}; make it executable (`chmod +x`) or "
            "fix [executor] command"
        )


def shell_refusal(status: int | None, output: str) -> ShellRefusal | None:
    """The shell's refusal to run a program, when an attempt that exited
    ``status`` ended its ``output`` saying one; else None."""
    if status not in (NOT_FOUND, NOT_EXECUTABLE):
        return None
    for line in reversed(_last_lines(output)):
        for form in _FORMS:
            found = form.pattern.fullmatch(line) if status in form.statuses else None
            if found is None:
                continue
            who = PurePath(found["who"].strip()).name
            if not form.any_who and who not in _SHELLS | _LAUNCHERS:
                continue
            speaker = f"`{who}`" if who in _LAUNCHERS else "the shell"
            program = visible(found["program"][:SAID_WIDTH])
            return ShellRefusal(program, status, form.meaning, visible(line[:SAID_WIDTH]), speaker)
    return None


def _last_lines(output: str) -> list[str]:
    """The last non-blank lines of the output, stripped (not yet made
    visible: the patterns read the shell's own bytes)."""
    lines = [line.strip() for line in output[-8192:].splitlines() if line.strip()]
    return lines[-SAID_LINES:]
