"""Continuing a cut-off attempt: where its client keeps the conversation, and what to say.

A client that can resume (:class:`gitrun.workers.presets.Resume`) keeps each
conversation in a file under its home. :func:`stored_conversation` finds it
by id and says how many turns it holds and how big it is (what the verdict's
:func:`gitrun.engine.verdict.next_try` weighs); :func:`conversation_said`
reads the id a client names in its first output; :func:`continuation` is the
short prompt a resumed try gets, the pointer repeated.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gitrun.workers.presets import Resume

# An id gitrun looks for in a client's home: a whole UUID (every resumable
# client's ids are), never a glob, an option, or a piece of another
# conversation's file name (codex's are matched by their tail).
_ID = re.compile(r"[0-9A-Fa-f]{8}-(?:[0-9A-Fa-f]{4}-){3}[0-9A-Fa-f]{12}")
SAID_WITHIN = 64 * 1024  # the head of a log the client names its conversation in


@dataclass(frozen=True)
class Stored:
    """A conversation as its client keeps it: whether it is there, the turns
    it did (tool calls), and its size in bytes."""

    found: bool
    turns: int = 0
    size: int = 0


def stored_conversation(resume: Resume, conversation: str, env: Mapping[str, str]) -> Stored:
    """Where the client of ``resume`` keeps ``conversation``, as a worker with
    environment ``env`` finds its home."""
    if not _ID.fullmatch(conversation):
        return Stored(False)
    variable, default = resume.home
    home = env.get(variable) or os.path.join(env.get("HOME") or os.path.expanduser("~"), default)
    pattern = os.path.join(glob.escape(home), resume.stored.format(conversation=conversation))
    for path in sorted(glob.glob(pattern)):
        try:
            size = os.path.getsize(path)
            if size > resume.max_bytes:
                return Stored(True, 0, size)
            with open(path, "rb") as handle:
                text = handle.read().decode("utf-8", "replace")
        except OSError:
            continue
        return Stored(True, len(re.findall(resume.turn, text)), size)
    return Stored(False)


def conversation_said(resume: Resume, log: Path) -> str:
    """The conversation id the client named at the head of its output (``""``: none)."""
    if not resume.said:
        return ""
    try:
        with open(log, "rb") as handle:
            head = handle.read(SAID_WITHIN).decode("utf-8", "replace")
    except OSError:
        return ""
    found = re.search(resume.said, head)
    return found[1] if found and _ID.fullmatch(found[1]) else ""


def continuation(pointer: str, why: str) -> str:
    """What a resumed try is told: it was cut off, and the pointer again."""
    return (
        f"gitrun: this conversation was cut off ({why}). Continue the task from where it "
        f"stopped; do not redo what is already done.\n{pointer}"
    )
