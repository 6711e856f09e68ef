"""Each agent client gitrun runs as a preset is one record, and nothing else
keys a table by a preset's name.

A client described in seven places (its argv in the executor, its install
hint in ``check``, its exit codes and model in two tables, its usage reader
in a third, its confinement in the sandbox) drifts: a new preset gets five
of the seven. Here the package is read as syntax, so a table reintroduced
anywhere fails this test with the file and line.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gitrun.definition.schema import (
    DEFAULT_BILLING_PATTERNS,
    DEFAULT_QUOTA_PATTERNS,
    DEFAULT_THROTTLE_PATTERNS,
)
from gitrun.errors import UsageError
from gitrun.workers.presets import DEFAULT, LEAD, PRESETS, Preset, client_of, preset

PACKAGE = Path(__file__).resolve().parents[2] / "gitrun"
HOME = PACKAGE / "workers" / "presets.py"
# "shell" is also the name of the [executor] field that holds the shell
# preset's script: it counts alone only where it is compared with a preset.
FIELD_TOO = "shell"


def _names(node: ast.AST, names: frozenset[str]) -> list[str]:
    """The preset names written as whole string literals in ``node``."""
    return [
        n.value
        for n in ast.walk(node)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names
    ]


def _says_preset(node: ast.AST) -> bool:
    return "preset" in ast.unparse(node).lower()


def preset_tables(package: Path, names: frozenset[str], home: Path | None = None) -> list[str]:
    """Every place outside ``home`` that keys something by a preset's name
    written as a literal, as ``path:line: what``:

    - a dict whose keys, or a set, list or tuple whose items, hold two or
      more preset names (a table, or a choice among presets);
    - a comparison (``==``, ``!=``, ``in``, ``not in``), a ``case``, a
      subscript or a ``.get`` with a preset's name as an operand (one
      preset's behaviour, written where its record is not). The shell
      preset's name counts alone only against something named ``preset``.
    """
    found: list[str] = []
    for path in sorted(package.rglob("*.py")):
        if home is not None and path == home:
            continue
        where = path.relative_to(package.parent)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            said = ""
            if isinstance(node, ast.Dict):
                keys = [k for k in node.keys if k is not None]
                if len({n for k in keys for n in _names(k, names) if k is not None}) >= 2:
                    said = "a dict keyed by presets"
            elif isinstance(node, ast.Set | ast.List | ast.Tuple):
                items = {v for e in node.elts if isinstance(e, ast.Constant) for v in [e.value]}
                if len(items & names) >= 2:
                    said = "a collection of preset names"
            elif isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                for operand in operands:
                    literal = _names(operand, names) if isinstance(operand, ast.Constant) else []
                    others = [o for o in operands if o is not operand]
                    if literal and (
                        literal[0] != FIELD_TOO or any(_says_preset(o) for o in others)
                    ):
                        said = f"a comparison with {literal[0]!r}"
            elif isinstance(node, ast.MatchValue):
                literal = _names(node.value, names)
                if literal and literal[0] != FIELD_TOO:
                    said = f"a case of {literal[0]!r}"
            elif isinstance(node, ast.Subscript):
                literal = _names(node.slice, names)
                if literal and (literal[0] != FIELD_TOO or _says_preset(node.value)):
                    said = f"a table looked up by {literal[0]!r}"
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and node.args
            ):
                literal = _names(node.args[0], names)
                if literal and (literal[0] != FIELD_TOO or _says_preset(node.func.value)):
                    said = f"a table looked up by {literal[0]!r}"
            if said:
                found.append(f"{where}:{getattr(node, 'lineno', 0)}: {said}")
    return found


def test_no_table_outside_the_records_is_keyed_by_a_preset() -> None:
    found = preset_tables(PACKAGE, frozenset(PRESETS), HOME)
    assert not found, "preset names keying tables outside workers/presets.py:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "code",
    [
        'READERS = {"claude": 1, "codex": 2}',
        'INSTALL = {"claude": "npm i", "gemini": "npm i", "x": 1}',
        'if executor.preset == "claude":\n    pass',
        'if "codex" != program:\n    pass',
        'if preset in ("aider", "gemini"):\n    pass',
        'model = MODELS["claude" if external else preset]',
        'model = MODELS.get("gemini")',
        'if executor.preset == "shell":\n    pass',
        'match name:\n    case "codex":\n        pass',
        'KNOWN = ["claude", "shell"]',
    ],
)
def test_the_walk_finds_a_reintroduced_table(tmp_path: Path, code: str) -> None:
    (tmp_path / "gitrun").mkdir()
    (tmp_path / "gitrun" / "mod.py").write_text(code + "\n")
    assert preset_tables(tmp_path / "gitrun", frozenset(PRESETS))


@pytest.mark.parametrize(
    "code",
    [
        'CLIENT = "claude"',  # one name, keying nothing
        'if where == "shell":\n    pass',  # the [executor] shell field
        'print("claude, codex or gemini")',  # words in a sentence
        'ARGS = ["--model", "claude-x"]',
    ],
)
def test_the_walk_leaves_what_keys_nothing(tmp_path: Path, code: str) -> None:
    (tmp_path / "gitrun").mkdir()
    (tmp_path / "gitrun" / "mod.py").write_text(code + "\n")
    assert preset_tables(tmp_path / "gitrun", frozenset(PRESETS)) == []


def test_every_preset_is_one_record_with_its_name() -> None:
    assert list(PRESETS) == ["claude", "codex", "gemini", "aider", "shell"]
    for name, record in PRESETS.items():
        assert isinstance(record, Preset) and record.name == name
        assert preset(name) is record
        if record.script:
            continue
        assert record.argv[0] == record.program == name
        assert "{model}" in record.argv and "{pointer}" in record.argv
        assert record.install and record.version == ("--version",)
        assert record.usage is not None and record.default_model
        assert client_of([f"/opt/bin/{name}", "x"]) is record
    assert client_of(["sh", "-c", "claude -p x"]) is None
    assert client_of([]) is None
    assert LEAD is PRESETS["claude"]


def test_an_unknown_preset_is_an_error_naming_the_known_ones() -> None:
    with pytest.raises(UsageError, match="claude, codex, gemini, aider, shell") as caught:
        preset("clade")
    assert "'clade'" in str(caught.value)


def test_each_client_s_refusal_words_are_in_the_default_patterns() -> None:
    """The packet's default throttle, quota and billing patterns (the
    definition's floor, below the records) hold every client's words."""
    for record in PRESETS.values():
        assert set(record.says.throttle) <= set(DEFAULT_THROTTLE_PATTERNS), record.name
        assert set(record.says.quota) <= set(DEFAULT_QUOTA_PATTERNS), record.name
        assert set(record.says.billing) <= set(DEFAULT_BILLING_PATTERNS), record.name
        for pattern in (*record.says.throttle, *record.says.quota, *record.says.billing):
            re.compile(pattern)


def test_the_plugin_installs_the_lead_s_client() -> None:
    """The plugin's code sits a floor below the records, so it names the
    client itself; this holds the two equal."""
    from gitrun.guard import plugin

    assert LEAD.program == plugin.CLIENT
    assert LEAD.install == plugin.INSTALL_CLIENT


def test_the_help_of_new_names_every_preset() -> None:
    from typer.testing import CliRunner

    from gitrun.cli.main import app

    result = CliRunner().invoke(app, ["new", "--help"], terminal_width=400)
    assert result.exit_code == 0, result.output
    listed = re.search(r"The agent CLI to launch: (.*?);", " ".join(result.output.split()))
    assert listed is not None, result.output
    assert f"{DEFAULT.name} (default)" in listed[1]
    assert re.findall(r"\w+", listed[1].replace("(default)", "")) == [
        *[n for n in PRESETS][:-1],
        "or",
        [*PRESETS][-1],
    ]
