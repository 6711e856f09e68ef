"""Text a worker controls, made visible before gitrun prints or stores it.

A file name a worker wrote, the last line of its output, a validator's
complaint about its output: gitrun puts such text into its sentences (the
audit's stray-file report, a halt's diagnosis, an attempt's reason), which
reach a terminal and, through the ledger, every later ``status`` on every
machine. A raw ``ESC ] 0 ; ... BEL`` there retitles the user's terminal,
``ESC [ 2 J`` clears it, a carriage return or a bidi override hides what
precedes it, a newline forges a line of gitrun's own. :func:`visible`
writes each such character as an escape (``\\x1b``, ``\\r``, ``\\u202e``)
so it is seen, never obeyed. It is the one way to do it: the sinks that
print a run's lines call it, and so do the places that store worker text.
"""

from __future__ import annotations

_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def visible(text: str, *, lines: bool = False) -> str:
    """``text`` with every character a terminal would obey or hide written as
    an escape: C0 controls, DEL, C1 controls (ESC, BEL, CSI, ...), format
    characters (bidi overrides, zero-width), line and paragraph separators,
    unpaired surrogates (undecodable bytes of a file name) and unassigned
    code points. Printable text, non-ASCII letters included, is unchanged,
    and so is what it returns (visible(visible(t)) == visible(t)).
    ``lines``: keep ``\\n`` as it is, for text of several lines gitrun wrote."""
    if text.isprintable() and (lines or "\n" not in text):
        return text  # the usual case, in one C loop: nothing to escape
    return "".join(_shown(ch, lines) for ch in text)


SAID_LINES = 3  # the worker's last lines kept with a failed attempt
SAID_WIDTH = 200  # characters kept of each


def last_lines(output: str, count: int = SAID_LINES) -> list[str]:
    """The last ``count`` non-blank lines of a worker's output, each cut to
    :data:`SAID_WIDTH` characters and made visible: what it said, for a
    failure's sentence and the ledger."""
    found: list[str] = []
    for line in reversed(output.splitlines()):
        if line.strip():
            found.append(visible(line.strip()[:SAID_WIDTH]))
            if len(found) == count:
                break
    return found[::-1]


def _shown(ch: str, lines: bool) -> str:
    if ch.isprintable() or (lines and ch == "\n"):
        return ch
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"
