"""The digest of the files a run's definition comes from: what the hook rules
are keyed by, so rules of an edited definition are never used."""

from __future__ import annotations

import hashlib
import os

from gitrun.layout import CONFIG_FILE, GITRUN_DIR, PACKET_NAME, RUNS_DIR, TASKS_NAME
from gitrun.store.regular import NotRegular, read_regular

TYPE_CHECKING = False  # typing costs a hook call milliseconds; mypy reads this as True
if TYPE_CHECKING:
    from collections.abc import Mapping

_SOURCES = (CONFIG_FILE, PACKET_NAME, TASKS_NAME)


def source_key(root: str, run_id: str, read: Mapping[str, bytes] | None = None) -> str:
    """The SHA-256 of the files a run's definition comes from (a missing one
    counts as absent, anything but a regular file by its kind, and a symbolic
    link by its target: loading refuses a linked packet or task table, and
    reads config.toml through its link, so that is hashed by its content
    too), and of whether the directories holding them are symbolic links
    (loading refuses those too). ``read`` gives the bytes a load read, by
    path, to hash instead of reading the files again."""
    digest = hashlib.sha256(b"gitrun definition 1\0")
    run_dir = os.path.join(root, RUNS_DIR, run_id)
    for directory in (GITRUN_DIR, RUNS_DIR, f"{RUNS_DIR}/{run_id}"):
        digest.update(b"L" if os.path.islink(os.path.join(root, directory)) else b"D")
    for index, name in enumerate(_SOURCES):
        path = os.path.join(root, name) if index == 0 else os.path.join(run_dir, name)
        try:
            if os.path.islink(path):
                digest.update(b"link\0" + os.readlink(path).encode("utf-8", "surrogateescape"))
                if index:
                    continue
            data = read[path] if read and path in read else read_regular(path)
        except (FileNotFoundError, NotADirectoryError):
            digest.update(b"absent\0")
            continue
        except NotRegular:
            digest.update(b"not a file\0")  # loading refuses it
            continue
        except OSError as exc:  # unreadable: loading says why
            digest.update(b"error %d\0" % (exc.errno or 0))
            continue
        digest.update(b"%d\0" % len(data))
        digest.update(data)
    return digest.hexdigest()
