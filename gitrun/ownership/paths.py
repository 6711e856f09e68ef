"""Canonical paths: the only spelling of a path gitrun accepts in a run definition.

Every owned, output, input and protected entry must be a canonical relative
POSIX path: components separated by single ``/``, no ``.`` or ``..``
component, no empty component (``//``), no leading ``/``, no whitespace at
either end of a component, no control character, no component over 255
bytes, and no component that git refuses or that aliases ``.git`` on some
file system (``.GIT``, ``.git.``, ``git~1``). A pattern may end in ``/`` (it
owns the tree beneath); an output may not (it is a file).

Why so strict: a path written two ways is two strings but one file. Before
this rule ``./out/a.json`` and ``out/a.json`` passed the overlap proof as two
paths, and git's ``update-index`` silently dropped names it refuses, so a
commit titled "t1 done" lacked t1's file. A non-canonical entry is a
``check`` problem that shows the canonical form, never a silent rewrite.
"""

from __future__ import annotations

import posixpath
import re
import unicodedata
from dataclasses import dataclass

NAME_MAX = 255  # bytes in one path component (Linux, macOS and git itself)
PATH_MAX = 4000  # bytes in a whole relative path: file systems refuse near 4,096 with the root
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Names git refuses as a component (core.protectNTFS, on by default) or that
# some file system reads as `.git`: `.git` in any case with trailing dots or
# spaces, and its 8.3 short name.
_GIT_ALIAS = re.compile(r"^(?:\.git[. ]*|git~1)$", re.IGNORECASE)


@dataclass(frozen=True)
class NotCanonical:
    """Why an entry is not canonical; ``canonical`` is its fixed spelling when one exists."""

    reason: str
    canonical: str | None = None
    code: str = "non-canonical-path"

    def sentence(self) -> str:
        if self.canonical:
            return f"{self.reason}; write it as {self.canonical!r}"
        return self.reason


# The common case, decided by one match: names that start with a letter, a
# digit, '_' or a wildcard (so never '.', '..' or a .git alias) and hold no
# space, separator or control character. Anything else takes the full path below.
_NAME = r"[A-Za-z0-9_*?\[][A-Za-z0-9_.+=,@%*?\[\]!^-]*"
_PLAIN = re.compile(rf"{_NAME}(?:/{_NAME})*")


def canonical_problem(text: str, *, is_file: bool) -> NotCanonical | None:
    """None when ``text`` is canonical, else what is wrong and the fix.

    ``is_file``: the entry names one file (an output, a bundle), so a
    trailing ``/`` is wrong too; patterns may end in ``/``.
    """
    if len(text) <= NAME_MAX and _PLAIN.fullmatch(text):
        return None
    if not text or not text.strip():
        return NotCanonical("is empty; name a path relative to the repository root")
    found = _CONTROL.search(text)
    if found:
        return NotCanonical(
            f"contains the control character {found[0]!r}; rename the file without it"
        )
    invisible = next((ch for ch in text if unicodedata.category(ch) == "Cf"), None)
    if invisible is not None:
        # Zero-width and format characters: invisible in every listing, and
        # some file systems (HFS+) drop them, so `.g\u200cit` is `.git` there.
        return NotCanonical(
            f"contains the invisible character U+{ord(invisible):04X}; rename the file without it"
        )
    if text.startswith(("/", "~")) or re.match(r"^[A-Za-z]:[\\/]", text):
        return NotCanonical(
            "is an absolute path, outside the repository; write it relative to the repository root",
            code="outside-repo",
        )
    if is_file and "\\" in text:
        return NotCanonical(
            "has a backslash, which is a directory separator on Windows; rename the file, "
            "and separate directories with '/'"
        )
    if len(text.encode("utf-8", errors="surrogatepass")) > PATH_MAX:
        return NotCanonical(
            f"is {len(text.encode('utf-8', errors='surrogatepass')):,} bytes long, over "
            f"{PATH_MAX:,}; file systems refuse paths that long — shorten it"
        )
    body = text[:-1] if text.endswith("/") and not is_file else text
    if is_file and text.endswith("/"):
        return NotCanonical(
            "ends in '/', which names a directory; an output is one file",
            _fixed(text.rstrip("/")),
        )
    parts = body.split("/")
    if any(part in ("", ".", "..") for part in parts):
        fixed = _fixed(text)
        if posixpath.normpath(body or ".") == ".":
            return NotCanonical("names the whole repository; name files or directories inside it")
        if fixed is None:
            return NotCanonical(
                "climbs out of the repository with '..'; write it relative to the repository root",
                code="outside-repo",
            )
        return NotCanonical("is not in canonical form (no '.', '..' or empty components)", fixed)
    for part in parts:
        if part != part.strip():
            return NotCanonical(
                f"has a name with whitespace at its start or end ({part!r})",
                _fixed("/".join(p.strip() for p in parts) + ("/" if body != text else "")),
            )
        if len(part.encode("utf-8", errors="surrogatepass")) > NAME_MAX:
            return NotCanonical(
                f"has a name of {len(part.encode('utf-8', errors='surrogatepass'))} bytes, over "
                f"the {NAME_MAX}-byte limit of file systems and git; shorten it"
            )
        if _GIT_ALIAS.match(part):
            return NotCanonical(
                f"has the name {part!r}, which git refuses or reads as .git; no task may write "
                "inside a .git directory",
                code="reserved-path",
            )
    return None


def _fixed(text: str) -> str | None:
    """The canonical spelling of a non-canonical path, or None when it climbs out."""
    keep_slash = text.endswith("/")
    norm = posixpath.normpath(text.rstrip("/") or ".")
    if norm == "." or norm == ".." or norm.startswith("../") or norm.startswith("/"):
        return None
    if norm.startswith("//"):
        norm = norm.lstrip("/")
    return norm + ("/" if keep_slash else "")
