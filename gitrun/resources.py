"""Files shipped with gitrun: templates/, hooks/ and claude-plugin/.

In a wheel they live inside the package (``gitrun/_data/``, see
pyproject.toml); in a checkout or an editable install they are the
top-level folders of the repository.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


@cache
def data_dir(name: str) -> Path:
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"gitrun's {name}/ folder is missing; reinstall gitrun")


def template_text(name: str) -> str:
    return (data_dir("templates") / name).read_text(encoding="utf-8")
