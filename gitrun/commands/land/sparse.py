"""Which paths a sparse checkout keeps out of the work tree, read as git
reads a cone.

In a sparse checkout (``git sparse-checkout set DIR...``, cone mode, git's
default) ``git merge`` commits every path of the merge but writes only
those inside the cone; the others get the skip-worktree bit in the index
and stay out of the work tree. A landing does the same, so a user who
checked out ``docs/`` alone does not find a run's ``out/`` in it.

A cone is its directories (what ``git sparse-checkout list`` prints): a
file is inside when it lies beneath one of them, directly in one of their
ancestors, or at the top of the repository. Git's older, non-cone mode
(patterns, deprecated by git) is not read: there the landing writes every
file, as it always did, and ``git sparse-checkout reapply`` takes the ones
outside the patterns away again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gitrun.store import git

_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


@dataclass(frozen=True)
class Cone:
    """The directories a cone-mode sparse checkout holds whole, and their ancestors."""

    whole: frozenset[str]
    ancestors: frozenset[str]

    @classmethod
    def of(cls, folders: list[str]) -> Cone:
        whole = frozenset(f.strip("/") for f in folders if f.strip("/"))
        ancestors = frozenset(
            "/".join(parts[:n])
            for parts in (f.split("/") for f in whole)
            for n in range(1, len(parts))
        )
        return cls(whole, ancestors)

    def is_outside(self, path: str) -> bool:
        folder = path.rpartition("/")[0]
        if not folder or folder in self.ancestors:
            return False
        parts = folder.split("/")
        return not any("/".join(parts[:n]) in self.whole for n in range(1, len(parts) + 1))


def sparse_cone(repo: Path) -> Cone | None:
    """The work tree's cone, or None when it is not a cone-mode sparse checkout."""
    if git.config_value(repo, "core.sparseCheckout", "bool") != "true":
        return None
    if git.config_value(repo, "core.sparseCheckoutCone", "bool") != "true":
        return None
    listed = git.git(repo, "sparse-checkout", "list").decode(errors="surrogateescape")
    return Cone.of([_unquoted(line) for line in listed.splitlines() if line])


def _unquoted(name: str) -> str:
    """A name as git prints it, C-quoted when it has special bytes."""
    if not (len(name) >= 2 and name.startswith('"') and name.endswith('"')):
        return name
    raw, out, i = name[1:-1].encode(errors="surrogateescape"), bytearray(), 0
    while i < len(raw):
        if raw[i] != 92 or i + 1 == len(raw):  # not a backslash
            out.append(raw[i])
            i += 1
        elif raw[i + 1 : i + 4].isdigit():  # \ooo: one byte, in octal
            out.append(int(raw[i + 1 : i + 4], 8))
            i += 4
        else:
            out.append(_ESCAPES.get(chr(raw[i + 1]), raw[i + 1]))
            i += 2
    return out.decode(errors="surrogateescape")
