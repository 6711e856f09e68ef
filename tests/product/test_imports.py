"""The package's folders are floors: a module imports from its own folder or a
floor below, never one above; lazy (function-level) and ``TYPE_CHECKING``
imports count the same. Nor do modules or folders import each other in a cycle.

A cycle is how two modules come to decide the same thing; the floors say which
way the layers point, from what everything shares up to the command line.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "gitrun"

# Bottom to top. The root (`gitrun/*.py`: errors, problems, file and branch
# names) is the floor everything stands on; the path-pattern language is pure
# logic, one floor above it.
FLOORS = [
    "gitrun",
    "gitrun.ownership",
    "gitrun.processes",
    "gitrun.store",
    "gitrun.definition",
    "gitrun.guard",
    "gitrun.workers",
    "gitrun.proof",
    "gitrun.engine",
    "gitrun.commands",
    "gitrun.mcp",  # the MCP server: the command set again, for MCP clients
    "gitrun.cli",
]
# `python -m gitrun` runs the command line: the one root module at the top.
PLACED = {"gitrun.__main__": len(FLOORS) - 1}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, dict[str, int]]:
    """Each module: the package's modules it imports, each with its first line."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        deps: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names if a.name in modules]
            elif isinstance(node, ast.ImportFrom) and node.module in modules and not node.level:
                # `from gitrun.store import git` imports the submodule
                subs = (f"{node.module}.{a.name}" for a in node.names)
                found = [sub if sub in modules else node.module for sub in subs]
            else:
                continue
            for dep in found:
                deps.setdefault(dep, node.lineno)
        deps.pop(name, None)
        graph[name] = deps
    return graph


def _folder(module: str) -> str:
    """The folder on FLOORS a module sits in (a nested folder counts as its parent's)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if ".".join(parts[:2]) in FLOORS else "gitrun"


def _floor(module: str) -> int:
    return PLACED.get(module, FLOORS.index(_folder(module)))


def _upward(graph: dict[str, dict[str, int]]) -> list[str]:
    return [
        f"{name} -> {dep} (line {line})"
        for name, deps in sorted(graph.items())
        for dep, line in sorted(deps.items())
        if _floor(dep) > _floor(name)
    ]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                found.append([*stack[stack.index(dep) :], dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def _package(module: str, graph: dict[str, dict[str, int]]) -> str:
    """The folder a module is in (its own name for a package's ``__init__``)."""
    is_package = any(other.startswith(module + ".") for other in graph)
    return module if is_package else module.rpartition(".")[0]


def _folder_graph(graph: dict[str, dict[str, int]]) -> dict[str, set[str]]:
    """Which folders each folder's modules import (the placed ones left out)."""
    folders: dict[str, set[str]] = {}
    for name, deps in graph.items():
        if name in PLACED:
            continue
        mine = _package(name, graph)
        theirs = {_package(dep, graph) for dep in deps} - {mine}
        folders.setdefault(mine, set()).update(theirs)
    for deps in list(folders.values()):
        for dep in deps:
            folders.setdefault(dep, set())
    return folders


def test_every_folder_has_a_floor() -> None:
    folders = {_module_name(p.parent) for p in PACKAGE.glob("*/__init__.py")}
    assert folders <= set(FLOORS), folders - set(FLOORS)


def test_no_module_imports_from_a_floor_above() -> None:
    graph = _graph()
    assert len(graph) > 40  # the walk found the package
    upward = _upward(graph)
    assert not upward, "imports that go up a floor:\n" + "\n".join(upward)


def test_the_floor_check_finds_an_upward_import() -> None:
    graph = {
        "gitrun.errors": {},
        "gitrun.store.git": {"gitrun.errors": 3, "gitrun.store.local": 4},
        "gitrun.store.local": {"gitrun.engine.driver": 9},  # lazy or not, it goes up
        "gitrun.engine.driver": {"gitrun.store.git": 1},
        "gitrun.__main__": {"gitrun.cli.entry": 1},
    }
    assert _upward(graph) == ["gitrun.store.local -> gitrun.engine.driver (line 9)"]


def _past_commands(graph: dict[str, dict[str, int]]) -> list[str]:
    """The imports of the command line that skip ``commands/``: what a command
    does lives there, called alike by the command line and the MCP server, so
    ``cli/`` reaches the floors under it only through it (the root's errors,
    problems and names stand under every floor)."""
    commands = FLOORS.index("gitrun.commands")
    return [
        f"{name} -> {dep} (line {line})"
        for name, deps in sorted(graph.items())
        if _folder(name) == "gitrun.cli"
        for dep, line in sorted(deps.items())
        if 0 < _floor(dep) < commands
    ]


def test_the_command_line_goes_through_the_commands() -> None:
    skipped = _past_commands(_graph())
    assert not skipped, "the command line skips commands/:\n" + "\n".join(skipped)


def test_the_commands_check_finds_a_skipped_floor() -> None:
    graph = {
        "gitrun.errors": {},
        "gitrun.cli.app": {"gitrun.errors": 1, "gitrun.commands.drive": 2, "gitrun.mcp.server": 3},
        "gitrun.cli.hooks": {"gitrun.guard.main": 7},  # lazy or not, it skips a floor
        "gitrun.mcp.server": {"gitrun.engine.status": 5},  # the MCP server is no command line
        "gitrun.commands.drive": {"gitrun.store.git": 1},
    }
    assert _past_commands(graph) == ["gitrun.cli.hooks -> gitrun.guard.main (line 7)"]


def test_the_package_has_no_import_cycle() -> None:
    graph = _graph()
    cycles = _cycles({name: set(deps) for name, deps in graph.items()})
    assert not cycles, "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_no_two_folders_import_each_other() -> None:
    cycles = _cycles(_folder_graph(_graph()))
    assert not cycles, "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]
    graph = {"gitrun.workers.attempt": {"gitrun.workers.ray.node": 1}}
    graph["gitrun.workers.ray.node"] = {"gitrun.workers.pointer": 1}
    assert _cycles(_folder_graph(graph)) == [
        ["gitrun.workers", "gitrun.workers.ray", "gitrun.workers"]
    ]


def test_only_the_command_line_imports_typer() -> None:
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).parts[0] == "cli":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {m for m in imported if m.split(".")[0] == "typer"}, path


def test_each_extra_is_imported_in_one_place() -> None:
    """The mcp SDK only by gitrun/mcp/, OpenTelemetry only by gitrun/engine/otel.py."""
    for path in PACKAGE.rglob("*.py"):
        where = path.relative_to(PACKAGE)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        tops = {m.split(".")[0] for m in imported}
        assert "mcp" not in tops or where.parts[0] == "mcp", where
        assert "opentelemetry" not in tops or where == Path("engine/otel.py"), where


@pytest.mark.parametrize(
    "args",
    [["--version"], ["status"], ["hook", "pre-write"], ["next", "--help"]],
    ids=["version", "status", "hook", "next-help"],
)
def test_the_base_commands_import_no_extra(git_repo: Path, args: list[str]) -> None:
    """`gitrun mcp` costs the rest nothing: no command but it imports the
    SDK (or an OpenTelemetry package), installed or not."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gitrun", *args],
        cwd=git_repo,
        input="{}",
        capture_output=True,
        text=True,
        timeout=120,
    )
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()]
    assert "gitrun" in imported, proc.stderr[-2000:]  # the check read what it should
    extras = [m for m in imported if m.split(".")[0] in ("mcp", "mcp_types", "opentelemetry")]
    assert not extras, extras


def test_every_package_init_is_empty() -> None:
    """Importing one module (the write hook's path) imports nothing else."""
    for init in PACKAGE.rglob("__init__.py"):
        if init.parent != PACKAGE:
            assert init.read_text(encoding="utf-8") == "", init


def _reaches(graph: dict[str, dict[str, int]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for dep in graph[todo.pop()].keys() - seen:
            seen.add(dep)
            todo.append(dep)
    return seen


# What decides task state sits below everything that acts on it.
ABOVE_THE_ENGINE = {
    "gitrun.engine.driver",
    "gitrun.engine.external",
    "gitrun.engine.recovery",
    "gitrun.engine.status",
    "gitrun.commands.session",
    "gitrun.commands.retry",
    "gitrun.commands.watchdog",
    "gitrun.commands.demo",
}


def test_the_engine_imports_nothing_that_acts_on_it() -> None:
    graph = _graph()
    below = _reaches(graph, "gitrun.engine.states")
    assert not below & ABOVE_THE_ENGINE
    assert not {m for m in below if m.startswith(("gitrun.commands", "gitrun.cli"))}
    # Both dispatch modes and status stand on it.
    for user in (
        "gitrun.engine.driver",
        "gitrun.engine.external",
        "gitrun.engine.status",
        "gitrun.engine.recovery",
    ):
        assert "gitrun.engine.states" in graph[user], user
    assert "gitrun.engine.driver" not in _reaches(graph, "gitrun.engine.external")
    assert "gitrun.engine.external" not in _reaches(graph, "gitrun.engine.driver")


# Imports sit at the top of a module. A few wait inside a function, where a
# measured start-up target (docs/performance.md: the write hook <= 3x
# `python -c pass`, `status` and `--help` <= 25x, `next` and `collect` <= 35x)
# would pay for a module the command does not use, or where the module is an
# optional extra. Each says why in a `# deferred:` comment in its function.
DEFERRED_CEILING = 80


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _deferred_imports(source: str) -> list[tuple[int, str]]:
    """Each import inside a function and outside ``if TYPE_CHECKING:``: its line,
    and the source of the innermost function it sits in."""
    lines = source.splitlines()
    found: list[tuple[int, str]] = []

    def walk(node: ast.AST, function: ast.AST | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                walk(child, child)
            elif isinstance(child, ast.If) and _is_type_checking(child):
                continue
            elif isinstance(child, ast.Import | ast.ImportFrom):
                if function is not None:
                    start, end = function.lineno, function.end_lineno or function.lineno
                    found.append((child.lineno, "\n".join(lines[start - 1 : end])))
            else:
                walk(child, function)

    walk(ast.parse(source), None)
    return found


def _deferred(package: Path) -> tuple[int, list[str]]:
    """How many imports wait in functions, and those whose function says not why."""
    count, unexplained = 0, []
    for path in sorted(package.rglob("*.py")):
        for line, body in _deferred_imports(path.read_text(encoding="utf-8")):
            count += 1
            if "# deferred:" not in body:
                unexplained.append(f"{path.relative_to(package.parent)}:{line}")
    return count, unexplained


def test_imports_wait_in_functions_only_where_a_target_needs_it() -> None:
    count, unexplained = _deferred(PACKAGE)
    assert not unexplained, (
        "imports inside a function without a `# deferred:` comment saying which "
        "start-up target (or optional extra) keeps them there; move them to the top:\n"
        + "\n".join(unexplained)
    )
    assert count <= DEFERRED_CEILING, (
        f"{count} imports wait inside functions, more than {DEFERRED_CEILING}: "
        "import at the top of the module"
    )


def test_the_deferred_check_finds_an_unexplained_import(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text(
        "import os\n"
        "TYPE_CHECKING = False\n"
        "if TYPE_CHECKING:\n"
        "    import typing\n"
        "def kept():\n"
        "    # deferred: the write hook\n"
        "    import json\n"
        "    def inner():\n"
        "        import re\n"
        "def lazy():\n"
        "    if True:\n"
        "        from pathlib import Path\n",
        encoding="utf-8",
    )
    assert _deferred(package) == (3, ["pkg/a.py:9", "pkg/a.py:12"])


def test_no_class_over_300_lines_and_no_engine_module_over_500() -> None:
    """The engine's jobs stay apart (the loop, launching, the verdict, the
    governor...): a class that outgrows 300 lines or an engine module 500
    has taken on a second job."""
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        where = path.relative_to(PACKAGE.parent)
        if path.parent.name == "engine" and len(source.splitlines()) > 500:
            too_long.append(f"{where}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > 300:
                    too_long.append(f"{where}: class {node.name}, {length} lines")
    assert not too_long, "\n".join(too_long)
