"""The fast reader of task tables returns what tomllib returns, or declines.

Tables are written by tomli-w (as `gitrun new` writes them) from drawn task
data, then mangled a character or a line at a time: whenever the fast reader
gives an answer it must be tomllib's, and it must answer for every plain table.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from gitrun.definition.load import load_run
from gitrun.definition.tasktoml import loads_task_table
from tests.helpers import write_run

# Text with every kind of character a key or a value may hold or must escape.
_text = st.text(
    st.one_of(
        st.sampled_from(list('abc/._-"\\\t\n\r #=[],{}\x00\x1f\x7f\u00e9\u2028\ufeff')),
        st.characters(),
    ),
    max_size=12,
)
_plain = st.text(st.sampled_from(list("abcxyz0123/._- \t\u00e9#=[],{}")), max_size=12)
_key = st.sampled_from(["id", "stage", "inputs", "owns", "outputs", "note", "bundle", "x-1", "2"])
_value = st.one_of(_text, st.lists(_text, max_size=3), _plain, st.lists(_plain, max_size=3))
# Every task has a list of outputs, so tomli-w writes [[task]] tables (it writes
# an array of tables without lists inline, which the fast reader declines).
_tasks = st.lists(
    st.builds(
        lambda fields, outputs: {**fields, "outputs": outputs},
        st.dictionaries(_key, _value, max_size=5),
        st.lists(st.one_of(_text, _plain), min_size=1, max_size=3),
    ),
    max_size=6,
)


def _tomllib(text: str) -> dict[str, Any] | None:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None


def _is_plain(value: object) -> bool:
    if isinstance(value, list):
        return all(map(_is_plain, value))
    assert isinstance(value, str)
    return not any(c in value for c in '"\\\n\r\x7f') and all(
        c == "\t" or ord(c) >= 0x20 for c in value
    )


@settings(max_examples=300, deadline=None)
@given(_tasks)
def test_tables_written_by_tomli_w_read_as_tomllib_reads_them(tasks: list[dict[str, Any]]) -> None:
    text = tomli_w.dumps({"task": tasks})
    fast = loads_task_table(text)
    if fast is not None:
        assert fast == tomllib.loads(text)
    if tasks and all(_is_plain(v) for task in tasks for v in task.values()):
        assert fast == tomllib.loads(text), text  # the plain subset is always read


@settings(max_examples=300, deadline=None)
@given(_tasks, st.integers(0, 10_000), st.sampled_from(list(' "\\[]=#,\n\r\tax.{}')), st.booleans())
def test_a_mangled_table_is_read_as_tomllib_reads_it_or_declined(
    tasks: list[dict[str, Any]], where: int, char: str, insert: bool
) -> None:
    text = tomli_w.dumps({"task": tasks})
    if text:
        at = where % len(text)
        text = text[:at] + char + text[at + (0 if insert else 1) :]
    fast = loads_task_table(text)
    if fast is not None:
        assert fast == _tomllib(text), text


@pytest.mark.parametrize(
    "text",
    [
        'id = "t1"\n',  # a key outside [[task]]
        '[[task]]\nid = "t1"\nid = "t2"\n',  # a key twice
        '[[task]]\nid = "t1" # note\n',
        "[[task]]\nid = 't1'\n",
        "[[task]]\nn = 1\n",
        '[[task]]\noutputs = [\n    "a",\n',  # the file ends inside the array
        '[[task]]\noutputs = [{ path = "a" }]\n',
        '[[task]]\r\nid = "t1"\r\n',
        '[[task]]\nid = "a\\tb"\n',
        '[task]\nid = "t1"\n',
    ],
)
def test_anything_outside_the_subset_is_declined(text: str) -> None:
    assert loads_task_table(text) is None


def test_the_shapes_tables_take() -> None:
    text = (
        '[[task]]\nid = "t1"\noutputs = [\n    "out/a b.json",\n]\ninputs = []\n\n'
        '[[task]]\nid = "t2"\nowns = ["x/**", "y"]\nnote = "tab\there, = [ ] #"\n'
    )
    assert loads_task_table(text) == tomllib.loads(text)
    assert loads_task_table("") == {} == tomllib.loads("")


def test_a_big_table_loads_the_same_fast_or_not(git_repo: Path) -> None:
    """A table past the cache size: the run loads the same tasks whether its
    text is in the subset or not (a comment sends it to tomllib)."""
    tasks = [{"id": f"t{i:05d}", "outputs": [f"out/t{i:05d}.json"]} for i in range(1500)]
    run_dir = write_run(git_repo, "r", tasks)
    fast = load_run(git_repo, "r", environ={}).tasks
    text = (run_dir / "tasks.toml").read_text()
    (run_dir / "tasks.toml").write_text("# a comment\n" + text)
    assert load_run(git_repo, "r", environ={}).tasks == fast
    assert len(fast) == 1500
