"""Reading big task tables fast: the plain subset of TOML that generated tables use.

tomllib is pure Python, about 14 us a task: 1.4 s for a table of 100,000
tasks, read again by every command until the parsed table is cached. Tables
that ``gitrun new`` or a script writes with tomli-w use a small subset of TOML:
``[[task]]`` headers and ``key = value`` lines whose values are basic strings
without escapes, or arrays of them (one line, or one element a line). This
module reads exactly that subset, line by line, and declines everything else
(comments, escapes, numbers, inline tables, a duplicate key, a stray
character), which tomllib then reads, its errors included. What it returns
is what tomllib returns for the same text: the test suite compares the two.
"""

from __future__ import annotations

import re
from typing import Any

# A basic string without escapes: no quote, backslash or control character but tab.
_STRING = r'"([^"\\\x00-\x08\x0a-\x1f\x7f]*)"'
_KEY_VALUE = re.compile(r"([A-Za-z0-9_-]+) = (.*)")
_SCALAR = re.compile(_STRING)
_INLINE_ARRAY = re.compile(rf"\[(?:{_STRING}(?:, {_STRING})*)?\]")
_INLINE_ITEM = re.compile(_STRING)
_ARRAY_ITEM = re.compile(rf"[ \t]*{_STRING},[ \t]*")
_BLANK = re.compile(r"[ \t]*")
HEADER = "[[task]]"


def loads_task_table(text: str) -> dict[str, Any] | None:
    """What ``tomllib.loads(text)`` returns, when ``text`` is a task table in the
    plain subset; None for any other text (tomllib must read it)."""
    if "\r" in text:
        return None
    tasks: list[dict[str, Any]] = []
    table: dict[str, Any] | None = None
    lines = iter(text.split("\n"))
    for line in lines:
        if line == HEADER:
            table = {}
            tasks.append(table)
            continue
        found = _KEY_VALUE.fullmatch(line)
        if found is None:
            if _BLANK.fullmatch(line):
                continue
            return None
        key, value = found.groups()
        if table is None or key in table:
            return None  # a key outside [[task]], or twice in one table
        if value == "[":  # one element a line, as tomli-w writes arrays
            items: list[str] = []
            for item_line in lines:
                if item_line == "]":
                    break
                item = _ARRAY_ITEM.fullmatch(item_line)
                if item is None:
                    return None
                items.append(item[1])
            else:
                return None  # the file ended inside the array
            table[key] = items
            continue
        scalar = _SCALAR.fullmatch(value)
        if scalar is not None:
            table[key] = scalar[1]
            continue
        if _INLINE_ARRAY.fullmatch(value) is None:
            return None
        table[key] = _INLINE_ITEM.findall(value)
    return {"task": tasks} if tasks else {}
