"""How an attempt's command line is built from the packet's executor table.

The model always comes from configuration through ``{model}``; a literal
model name in a command is a problem ``gitrun check`` reports.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

from gitrun.settings import Executor

PLACEHOLDERS = ("pointer", "task", "run", "model", "packet", "attempt", "outputs", "stage")
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")

# Each preset's exact argv; README.md documents them. The packet may replace
# any of them with its own `command`.
PRESETS: dict[str, list[str]] = {
    "claude": [
        "claude", "-p", "{pointer}", "--model", "{model}",
        "--permission-mode", "acceptEdits", "--output-format", "text",
    ],
    "codex": ["codex", "exec", "--model", "{model}", "--sandbox", "workspace-write", "{pointer}"],
    "gemini": ["gemini", "--model", "{model}", "--yolo", "--prompt", "{pointer}"],
    "aider": [
        "aider", "--model", "{model}", "--no-auto-commits", "--yes-always",
        "--message", "{pointer}",
    ],
}  # fmt: skip
SHELL_PRESET = "shell"

# Versioned model names, found anywhere in an argument (also inside `sh -c` scripts).
_MODEL_NAME = re.compile(
    r"(?<![\w{./-])("
    r"claude-[\w.-]*\d[\w.-]*|gpt-\d[\w.-]*|chatgpt-[\w.-]+|o[134]-(?:mini|pro)[\w.-]*"
    r"|gemini-\d[\w.-]*|llama-?\d[\w.-]*|mistral-[\w.-]+|mixtral-[\w.-]+|deepseek-[\w.-]+"
    r"|qwen\d?[\w.-]*-\d[\w.-]*|codestral-[\w.-]+|grok-\d[\w.-]*"
    r")(?![\w}])",
    re.IGNORECASE,
)
# Short aliases count only as a whole argument or a --model value.
_MODEL_ALIASES = {"opus", "sonnet", "haiku", "o1", "o3", "o4-mini", "gpt-5"}
# `--model X` anywhere; `-m` is ambiguous (`python -m`, `git commit -m`), so
# its value counts only when it looks like a model name.
_MODEL_FLAG = re.compile(r"(?:^|\s)--model(?:=|\s+)(\S+)")


def command_template(executor: Executor) -> list[str] | None:
    """The argv template for a command executor; None when there is none.

    `command` replaces the preset entirely; `args` are appended either way.
    The claude preset also gets gitrun's write-time hooks through
    `--settings`, so ownership is enforced while the agent writes.
    """
    if executor.command is not None:
        base = list(executor.command)
    elif executor.preset == SHELL_PRESET:
        if not executor.shell:
            return None
        base = ["sh", "-c", executor.shell]
    elif executor.preset in PRESETS:
        base = list(PRESETS[executor.preset])
        if executor.preset == "claude":
            base += ["--settings", claude_settings()]
    else:
        return None
    return base + list(executor.args)


def claude_settings() -> str:
    import json

    from gitrun.install import claude_hooks

    return json.dumps({"hooks": claude_hooks()}, separators=(",", ":"))


def executor_problems(executor: Executor) -> list[str]:
    """Sentences about an executor table that cannot produce a command."""
    if executor.kind != "command":
        return []
    if executor.command is None and executor.preset is None:
        return [
            '[executor] has neither `preset` nor `command`; set preset = "claude" (or codex, '
            'gemini, aider, shell) or command = ["program", "{pointer}", ...]'
        ]
    if executor.command is None and executor.preset not in (*PRESETS, SHELL_PRESET):
        return [
            f"[executor] preset {executor.preset!r} is unknown; use one of "
            f"{', '.join([*PRESETS, SHELL_PRESET])}"
        ]
    if executor.command is None and executor.preset == SHELL_PRESET and not executor.shell:
        return ['[executor] preset "shell" needs `shell = "the command line to run"`']
    return []


def literal_models(argv: list[str]) -> list[str]:
    """Model names written into a command instead of ``{model}``."""
    found: list[str] = []
    for i, arg in enumerate(argv):
        value = argv[i + 1] if i + 1 < len(argv) else "{model}"
        if arg == "--model" and value != "{model}":
            found.append(value)
        if arg == "-m" and (value.lower() in _MODEL_ALIASES or _MODEL_NAME.fullmatch(value)):
            found.append(value)
        for value in _MODEL_FLAG.findall(arg):
            if value.strip("'\"") != "{model}":
                found.append(value.strip("'\""))
        if arg.lower() in _MODEL_ALIASES:
            found.append(arg)
        found += _MODEL_NAME.findall(arg)
    return list(dict.fromkeys(found))


def render_argv(
    template: list[str], values: Mapping[str, str], *, shell_quote: bool = False
) -> list[str]:
    """Fill ``{placeholder}``s; other braces (JSON, shell) are left alone.

    An element that is exactly ``{outputs}`` becomes one argument per output.
    In a ``sh -c`` script (``shell_quote``) every value is shell-quoted.
    """
    out: list[str] = []
    for arg in template:
        if arg == "{outputs}" and not shell_quote:
            out += [line for line in values.get("outputs", "").split("\n") if line]
            continue

        def fill(found: re.Match[str]) -> str:
            value = values.get(found[1], "")
            if shell_quote:
                if found[1] == "outputs":
                    return " ".join(shlex.quote(v) for v in value.split("\n") if v)
                return shlex.quote(value)
            return value

        out.append(_PLACEHOLDER.sub(fill, arg))
    return out


_SHELLS = {"sh", "bash", "dash", "zsh", "ksh"}


def render_command(template: list[str], values: Mapping[str, str]) -> list[str]:
    """Fill a command template; in ``sh -c SCRIPT`` the script's values are shell-quoted."""
    if len(template) >= 3 and template[0].rsplit("/", 1)[-1] in _SHELLS and template[1] == "-c":
        script = render_argv([template[2]], values, shell_quote=True)
        return [template[0], "-c", *script, *render_argv(template[3:], values)]
    return render_argv(template, values)
