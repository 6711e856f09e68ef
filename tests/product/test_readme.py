"""The README's first run works exactly as written: its commands, typed into a
shell in a fresh temporary directory with gitrun on PATH and nothing else set
up, define the run, drive it and land it, and print what the README shows."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import user_env

README = Path(__file__).resolve().parents[2] / "README.md"
# A command followed by the output it prints, as the README writes it:
# `cat out/b.json   # {"words": 3}`.
SAYS = re.compile(r"^(?:cat|gitrun) .*?\s{2,}# (.+)$")


def _first_run() -> tuple[list[str], list[str]]:
    """The shell blocks of the README's "A first run" (up to its first
    subsection), and the output blocks shown beside them."""
    section = README.read_text(encoding="utf-8").split("\n## A first run\n", 1)[1]
    section = re.split(r"\n#{2,3} ", section, maxsplit=1)[0]
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", section, re.DOTALL | re.MULTILINE)
    return [body for kind, body in blocks if kind == "sh"], [b for k, b in blocks if not k]


def test_the_first_run_is_one_command_to_define_and_one_to_run() -> None:
    scripts, _ = _first_run()
    typed = [line for script in scripts for line in script.splitlines()]
    gitrun = [line.split("#")[0].strip() for line in typed if line.startswith("gitrun ")]
    assert gitrun[:2] == [
        "gitrun new wc --inputs 'docs/*.md' --output 'out/{stem}.json' -- sh worker.sh",
        "gitrun start wc",
    ]
    assert not any(".gitrun/" in line and ">" in line for line in typed)  # no packet written


@pytest.mark.usefixtures("gitrun_on_path")
def test_the_readme_first_run_works_as_written(tmp_path: Path) -> None:
    assert shutil.which("gitrun") is not None, "the gitrun under test is not installed"
    scripts, shown = _first_run()
    done = subprocess.run(
        ["sh", "-ec", "\n".join(scripts)],
        cwd=tmp_path,
        env={**user_env(), "TMPDIR": str(tmp_path)},  # `mktemp -d` makes its folder here
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "error" not in done.stderr, done.stderr
    said = [SAYS.match(line) for script in scripts for line in script.splitlines()]
    expected = [found[1] for found in said if found]
    # Each line the README shows on standard output (not the timestamped log
    # lines, not the per-event lines on stderr, whose hashes differ per run).
    for block in shown:
        expected += [
            line
            for line in block.splitlines()
            if line and line != "…" and not line.startswith("gitrun:") and line[:1] != "2"
        ]
    assert len(expected) >= 8
    for line in expected:
        assert line in done.stdout, f"the README shows {line!r}; the run printed:\n{done.stdout}"
    [repo] = [path.parent for path in tmp_path.glob("*/notes/.git")]
    landed = subprocess.run(
        ["git", "ls-files", "out"], cwd=repo, capture_output=True, text=True, check=True
    )
    assert landed.stdout.split() == ["out/a.json", "out/b.json", "out/c.json"]
