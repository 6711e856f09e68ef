"""Files into a scratch directory and a task's declared outputs out of it.

A Ray node's scratch attempt (:mod:`gitrun.workers.ray.node`) and a local
one (:mod:`gitrun.workers.scratch`) are filled by :func:`materialize` and
emptied by :func:`collect`. Standard library only: the Ray executor ships
this module to the cluster by value, with the node's, so a node needs Ray
and Python, not gitrun.
"""

from __future__ import annotations

import os
import stat
from typing import Any


def materialize(root: str, files: dict[str, bytes], outputs: list[str]) -> None:
    """Write ``files`` (path -> bytes) under ``root``, and make the
    directories of the ``outputs`` (as in the work tree: workers should not
    have to)."""
    for path, data in files.items():
        target = os.path.join(root, *_parts(path))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as handle:
            handle.write(data)
    for path in outputs:
        os.makedirs(os.path.join(root, *_parts(path)[:-1]), exist_ok=True)


def _parts(path: str) -> list[str]:
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{path!r} is not a relative path inside the repository")
    return parts


def collect(root: str, spec: dict[str, Any]) -> tuple[dict[str, bytes], dict[str, str]]:
    """The declared outputs' bytes, and why the others cannot come back."""
    cap = int(spec["max_output_bytes"])
    outputs: dict[str, bytes] = {}
    refused: dict[str, str] = {}
    for path in spec["outputs"]:
        try:
            fd = _open_beneath(root, _parts(path))
        except FileNotFoundError:
            continue  # not written: the driver's check says "does not exist"
        except OSError:
            refused[path] = "is or passes through a symlink on the node, so it was not brought back"
            continue
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                refused[path] = "is not a regular file on the node, so it was not brought back"
            elif info.st_size > cap:
                refused[path] = (
                    f"is {info.st_size:,} bytes on the node, over limits.max_output_bytes "
                    f"({cap:,}), so it was not brought back; write less or raise the limit"
                )
            else:
                outputs[path] = handle.read(cap + 1)
    return outputs, refused


def _open_beneath(root: str, parts: list[str]) -> int:
    """Open ``parts`` under ``root`` without following a symlink on the way."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in parts[:-1]:
            step = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = step
        return os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)
