"""Agent clients' atomic-write temporaries (part of the path they are
written for) and the marks a client leaves in the places the audit watches.

Claude Code's Write tool writes ``out/b.json.tmp.<pid>.<hex>`` beside its
target and renames it into place. Caught between the two steps,
the temporary looked like a file written outside every owned path, and the
audit reported about one owned write in five as a violation. A temporary of
a path is judged as that path, in the audit and in the hooks alike; the
pattern is tight (digits, then lower-case hex, and nothing after), so
``out/b.json.evil`` or ``out/b.json.tmp`` stay strays.

Claude Code's Bash sandbox (bubblewrap) makes an empty folder
``.git/info/.claude-sandbox-noreplace`` when it starts: a mark of the
client, not a worker's write. Only that, by that name and as an empty
folder, is passed over; a file of that name, or anything inside it, counts.
"""

from __future__ import annotations

import os
import re
import stat

_TEMPORARY = re.compile(r"(?P<target>.+)\.tmp\.[0-9]+\.[0-9a-f]+")


def target_of_temporary(path: str) -> str | None:
    """The path a client's atomic-write temporary ``path`` is written for;
    None when ``path`` is not such a temporary."""
    found = _TEMPORARY.fullmatch(path)
    if found is None or found["target"].endswith("/"):
        return None
    return found["target"]


# Folders a client makes in the git directory's watched places (docs/guarantees.md).
CLIENT_MARKS = frozenset([".claude-sandbox-noreplace"])


def is_client_mark(path: str) -> bool:
    """Whether ``path`` (in a watched folder of the git directory) is a mark
    a client makes there: one of :data:`CLIENT_MARKS`, an empty folder."""
    if os.path.basename(path) not in CLIENT_MARKS:
        return False
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode) and not os.listdir(path)
    except OSError:
        return False
