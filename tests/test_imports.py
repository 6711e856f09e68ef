"""The package's imports form no cycle, lazy (function-level) imports included.

A cycle is how two modules come to decide the same thing; the layers point
one way: definition, then state, then the engine, then commands, then the CLI.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gitrun"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom) and node.module in modules and not node.level:
                for alias in node.names:
                    # `from gitrun.cli import define` imports the submodule.
                    sub = f"{node.module}.{alias.name}"
                    deps.add(sub if sub in modules else node.module)
        deps.discard(name)
        graph[name] = deps
    return graph


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


def test_the_package_has_no_import_cycle() -> None:
    graph = _graph()
    assert len(graph) > 40  # the walk found the package
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]


def test_only_the_command_line_imports_typer() -> None:
    for path in PACKAGE.rglob("*.py"):
        if "cli" in path.relative_to(PACKAGE).parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {m for m in imported if m.split(".")[0] == "typer"}, path


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for dep in graph[todo.pop()] - seen:
            seen.add(dep)
            todo.append(dep)
    return seen


# What decides task state sits below everything that acts on it.
ABOVE_THE_ENGINE = {
    "gitrun.driver",
    "gitrun.external",
    "gitrun.recovery",
    "gitrun.session",
    "gitrun.state",
    "gitrun.retry",
    "gitrun.watchdog",
    "gitrun.demo",
}


def test_the_engine_imports_nothing_that_acts_on_it() -> None:
    graph = _graph()
    below = _reaches(graph, "gitrun.engine")
    assert not below & ABOVE_THE_ENGINE
    assert not {m for m in below if m.startswith("gitrun.cli")}
    # Both dispatch modes and status stand on it.
    for user in ("gitrun.driver", "gitrun.external", "gitrun.state", "gitrun.recovery"):
        assert "gitrun.engine" in graph[user], user
    assert "gitrun.driver" not in _reaches(graph, "gitrun.external")
    assert "gitrun.external" not in _reaches(graph, "gitrun.driver")
