"""Agent clients' atomic-write temporaries: part of the path they are written for.

Claude Code's Write tool writes ``out/b.json.tmp.<pid>.<hex>`` beside its
target and renames it into place. Caught between the two steps,
the temporary looked like a file written outside every owned path, and the
audit reported about one owned write in five as a violation. A temporary of
a path is judged as that path, in the audit and in the hooks alike; the
pattern is tight (digits, then lower-case hex, and nothing after), so
``out/b.json.evil`` or ``out/b.json.tmp`` stay strays.
"""

from __future__ import annotations

import re

_TEMPORARY = re.compile(r"(?P<target>.+)\.tmp\.[0-9]+\.[0-9a-f]+")


def target_of_temporary(path: str) -> str | None:
    """The path a client's atomic-write temporary ``path`` is written for;
    None when ``path`` is not such a temporary."""
    found = _TEMPORARY.fullmatch(path)
    if found is None or found["target"].endswith("/"):
        return None
    return found["target"]
