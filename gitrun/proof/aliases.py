"""Paths that are one file only on some file systems: case and Unicode form.

macOS and Windows fold case and normalise Unicode, so ``TODO.md`` and
``todo.md``, or ``Docs/`` and ``docs/``, are one file there, where a paused
run may well be resumed. ``gitrun check`` reports owned paths that meet
another task's, a protected or a reserved path only once folded.
"""

from __future__ import annotations

import unicodedata

from gitrun.definition.load import RunDef
from gitrun.ownership.claims import OWNS, Claim, find_meetings
from gitrun.ownership.patterns import Pattern, PatternError, intersect, parse
from gitrun.problem import Problem


def _fold(text: str) -> str:
    """The spelling a case-insensitive, normalising file system (macOS, Windows) sees."""
    if text.isascii():
        return text.lower()
    return unicodedata.normalize("NFC", text).casefold()


def case_alias_problems(
    run: RunDef,
    owned: list[Claim],
    protected: list[tuple[str, Pattern]],
    reserved: tuple[str, ...],
) -> list[Problem]:
    """Owned paths that meet another task's, a protected or a reserved path
    only once case and Unicode form are ignored: one file on macOS and
    Windows, where a paused run may be resumed (`TODO.md` and `todo.md`).

    One trie walk over the folded spellings; a pair that meets as written is
    left to the exact checks, and a pair where nothing was folded cannot
    meet only after folding, so it is not even compared."""
    shared = [(text, pattern) for text, pattern in protected]
    shared += [(name, parse(name)) for name in reserved]
    entries = [(c.task, c.text, c.pattern) for c in owned]
    entries += [(_SHARED, text, pattern) for text, pattern in shared]
    changed: dict[tuple[str, str], Pattern] = {}  # (task, text) -> the folded pattern
    for task, text, _ in entries:
        spelled = _fold(text)
        if spelled != text:
            try:
                changed[(task, text)] = parse(spelled)
            except PatternError:
                continue
    if not changed:
        return []
    # Only a claim at, above or beneath a folded one can meet it: the walk
    # takes those, not the whole run.
    heads = {pattern.literal_prefix for pattern in changed.values()}
    above = {head[:n] for head in heads for n in range(len(head) + 1)}
    firsts = {head[0] for head in heads if head}
    everywhere = () in heads  # a folded claim with no leading name reaches every claim

    def near(prefix: tuple[str, ...]) -> bool:
        if everywhere or prefix in above:
            return True
        if prefix[0] not in firsts:
            return False
        return any(prefix[:n] in heads for n in range(len(prefix)))

    folded: list[Claim] = []
    exact: dict[tuple[str, str], Pattern] = {}
    for task, text, pattern in entries:
        key = (task, text)
        as_folded = changed.get(key)
        if as_folded is None and not near(pattern.literal_prefix):
            continue
        exact[key] = pattern
        folded.append(Claim(task, text, pattern if as_folded is None else as_folded, OWNS))

    def conflicts(a: Claim, b: Claim) -> bool:
        if a.task == _SHARED and b.task == _SHARED:
            return False
        return (a.task, a.text) in changed or (b.task, b.text) in changed

    out: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for meeting in find_meetings(folded, conflicts):
        a, b = sorted((meeting.first, meeting.second), key=lambda c: c.task != _SHARED)
        if intersect(exact[(a.task, a.text)], exact[(b.task, b.text)]) is not None:
            continue  # they meet as written: reported already
        if a.task == _SHARED:
            if (b.task, b.text) in seen:
                continue
            seen.add((b.task, b.text))
            out.append(
                Problem(
                    "protected",
                    f"{run.tasks_path}: task {b.task} owns {b.text!r}, which is {a.text} on "
                    "case-insensitive file systems (macOS, Windows); no task may own it — "
                    "rename or narrow the pattern",
                    (b.task,),
                    meeting.witness,
                )
            )
            continue
        a, b = sorted((a, b), key=lambda c: c.task)
        if (a.task, b.task) in seen:
            continue
        seen.add((a.task, b.task))
        out.append(
            Problem(
                "overlap",
                f"{run.tasks_path}: tasks {a.task} and {b.task} own {a.text!r} and {b.text!r}, "
                "which name one path on case-insensitive file systems (macOS, Windows); give "
                "them names that differ by more than case",
                (a.task, b.task),
                meeting.witness,
            )
        )
    return out


_SHARED = "\0shared"  # the task of a claim standing for a protected or reserved entry
