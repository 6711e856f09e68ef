"""The project's text says its reasons itself: no comment, doc or test points
at an issue or a design-rule number, which a reader of the repository cannot
open (a link to an upstream project's bug is fine: it can be opened)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Spelled in parts, so this file does not match itself.
POINTER = re.compile(
    r"\b(?:"
    + "iss"
    + r"ues?\s+#?[0-9]+|"
    + "(?-i:DES"
    + r"IGN)(?:\.md)?\b|(?<![-\w])"
    + "ru"
    + r"le\s+[0-9]+)",
    re.IGNORECASE,
)
TEXT = (".py", ".md", ".toml", ".txt", ".sh", ".css", ".js", "")


def _tracked() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout (an unpacked sdist): nothing to list")
    out = listed.stdout.decode()
    return [ROOT / name for name in out.split("\0") if name and Path(name).suffix in TEXT]


def test_no_text_points_at_an_issue_or_rule_number() -> None:
    found = []
    for path in _tracked():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if "://" not in line and POINTER.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "say the reason instead:\n" + "\n".join(found)


def test_the_pattern_finds_a_pointer() -> None:
    for line in (
        "(is" + "sue 11)",
        "Is" + "sue 15: the budget",
        "DES" + "IGN.md",
        "ru" + "le 5",
    ):
        assert POINTER.search(line), line
    for line in ("a hook rule", "the rules of 3 tasks", "issued 3 leases", "by design"):
        assert not POINTER.search(line), line


def test_every_claude_print_command_shown_can_write() -> None:
    """`claude -p` refuses every write without a permission mode, so each
    command line the docs show names one."""
    shown = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```[a-z]*\n(.*?)```", page.read_text(), re.DOTALL):
            for command in block.replace("\\\n", " ").splitlines():
                if "claude -p" in command:
                    shown.append(command)
                    assert "--permission-mode" in command, f"{page.name}: {command}"
    assert shown  # the check looked at something


def test_ci_runs_the_readme_test_command_as_written() -> None:
    """CI takes the README's test command from the README (the first line that runs the suite)
    and runs it unactivated: that line must be the whole command a newcomer types."""
    marker = ".venv/bin/python -m pytest"
    first = next(line for line in (ROOT / "README.md").read_text().splitlines() if marker in line)
    assert first.startswith("python3 -m venv .venv && ") and first.endswith(marker), first
    ci = (ROOT / ".ci" / "run").read_text()
    assert f'grep -m 1 -F "{marker}" README.md' in ci and "bin/activate" not in ci
