"""One record per agent client gitrun runs as a preset: everything keyed by its name.

A :class:`Preset` holds what the rest of gitrun needs of one client: the argv
the executor runs, the model ``gitrun new`` writes for it, how it reports
usage (its reader in :mod:`gitrun.workers.clientusage`), how it says its
environment failed (:mod:`gitrun.workers.clients`), the throttle, usage-limit
and billing words it prints, how ``gitrun check`` proves it is installed
(``--version``) and how to install it, and what confinement changes for it.
Every place that needs a preset reads :data:`PRESETS` or :func:`preset`; no
other module keys a table by a preset's name (``tests/workers/test_presets.py``).

The model always goes in through ``--model {model}`` in the argv; no preset
needs an environment variable of its own. The signs and the usage reader
belong to the program, not to the preset: a ``command`` that runs ``codex``
directly is judged and read the same way (:func:`client_of`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from types import MappingProxyType

from gitrun.errors import UsageError
from gitrun.workers.clients import ClientSigns
from gitrun.workers.clientusage import (
    AiderReader,
    ClaudeReader,
    CodexReader,
    GeminiReader,
    UsageReader,
    asked_model,
)


@dataclass(frozen=True)
class Says:
    """The patterns of a client's own words (searched case-insensitively) for
    an API that is busy (``throttle``), a usage limit with a reset
    (``quota``), and a billing refusal or spend cap (``billing``). The run's
    ``limits`` patterns are what the verdict matches; their defaults hold
    every client's (the definition sits below this floor, so a test holds
    them equal)."""

    throttle: tuple[str, ...] = ()
    quota: tuple[str, ...] = ()
    billing: tuple[str, ...] = ()


@dataclass(frozen=True)
class Hooks:
    """How gitrun's write hooks reach a client that runs them: as JSON through
    ``settings`` (filled in per attempt when its Bash sandbox names the
    repository), and what takes its shell away (``[executor] bash = "deny"``).
    The hooks read the repository, so its attempts run in place: not in a
    scratch directory, not on a Ray node's scratch, not in gitrun's sandbox
    (its own holds its shell)."""

    settings: str
    deny_bash: tuple[str, ...]


@dataclass(frozen=True)
class Resume:
    """How a client continues a conversation an attempt was cut off in
    (docs/agent-clients.md, "Continuing a cut-off attempt").

    A fresh try adds ``given`` to its argv (the conversation's id given up
    front, ``{conversation}``) and leaves out ``drop`` (what keeps the client
    from saving it); a client that takes no id names it in its output, which
    ``said`` reads (its first group). A resumed try runs ``argv``, whose
    ``{pointer}`` is the continuation prompt. The conversation is kept under
    the client's home (``home``: the variable naming it, else ``default``
    under ``$HOME``) in the file ``stored`` matches (``{conversation}`` the
    id); a line matching ``turn`` there is a turn it did (none: nothing to
    continue), and one over ``max_bytes`` is too large to reload."""

    argv: tuple[str, ...]
    home: tuple[str, str]
    stored: str
    turn: str
    given: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()
    said: str = ""
    max_bytes: int = 32 * 2**20


@dataclass(frozen=True)
class Preset:
    """One agent client, as gitrun runs it."""

    name: str  # what `[executor] preset` and `gitrun new --preset` say
    program: str  # the argv[0] a `command` runs it by
    argv: tuple[str, ...]  # the executor's template; the shell preset's script follows it
    default_model: str | None  # what `gitrun new --preset NAME` writes as the packet's model
    install: str = ""  # how its CLI installs, for `check`'s problem that finds it missing
    version: tuple[str, ...] = ()  # the arguments `check` proves it with; its answer's first
    # line (exit 0) goes into the summary
    usage: type[UsageReader] | None = None  # how its output reports what it used
    signs: ClientSigns | None = None  # how it says its environment, not its task, failed
    says: Says = field(default_factory=Says)
    hooks: Hooks | None = None  # gitrun's write hooks, given through its own settings
    # Under gitrun's sandbox: argv words its own sandbox needs replaced
    # (its sandbox cannot nest inside gitrun's).
    when_confined: tuple[tuple[str, str], ...] = ()
    # Under isolation = "auto": why gitrun leaves it unconfined ("": gitrun confines it).
    own_sandbox: str = ""
    script: bool = False  # its command line is the packet's `[executor] shell` script
    resume: Resume | None = None  # how it continues a cut-off attempt's conversation


_NETWORK_FIX = "check the network and the client's API base URL and key"

# Each preset's exact argv; docs/definition.md documents them. The packet may
# replace any of them with its own `command`. Each flag is one the real client
# needs to run unattended; docs/agent-clients.md says why. The JSON output
# formats carry each client's own usage report, which the ledger keeps per
# attempt. The models: an alias or a name the client accepts with its usual
# credentials. The signs were read from the clients' sources and observed
# against a refused connection with the versions in the compatibility table
# of docs/agent-clients.md.
# fmt: off
CLAUDE = Preset(
    name="claude",
    program="claude",
    argv=(
        "claude", "-p", "{pointer}", "--model", "{model}",
        "--permission-mode", "acceptEdits", "--output-format", "json",
    ),
    default_model="sonnet",  # Claude Code's alias
    install="npm install -g @anthropic-ai/claude-code",
    version=("--version",),
    usage=ClaudeReader,
    says=Says(
        throttle=(r"temporarily limiting requests", r"overloaded", r"\b529\b"),
        # "You've hit your 5-hour limit · resets 10:51pm (UTC)", its API
        # error, and its stream's rate_limit_event.
        quota=(
            r"usage_limit_reached",
            r"you['\u2019]?ve hit your (\S+ )?(usage )?limit",
            r'"rate_limit_info"\s*:\s*\{[^}]*"status"\s*:\s*"rejected"',
        ),
        billing=(r"credit balance is too low",),
    ),
    hooks=Hooks("--settings", ("--disallowedTools", "Bash")),
    # Its conversation under ~/.claude/projects/<the directory, dashed>/<id>.jsonl,
    # one JSON line per message.
    resume=Resume(
        argv=(
            "claude", "-p", "{pointer}", "--resume", "{conversation}", "--model", "{model}",
            "--permission-mode", "acceptEdits", "--output-format", "json",
        ),
        home=("CLAUDE_CONFIG_DIR", ".claude"),
        stored="projects/*/{conversation}.jsonl",
        turn=r'"type":"tool_use"',
        given=("--session-id", "{conversation}"),
    ),
)
CODEX = Preset(
    name="codex",
    program="codex",
    # --ephemeral: no saved session per task (left out where its attempts
    # may be resumed: `[executor] resume`, on by default).
    argv=(
        "codex", "exec", "--model", "{model}", "--sandbox", "workspace-write", "--ephemeral",
        "--json", "{pointer}",
    ),
    default_model="gpt-6.2-sol",  # what codex 0.171 picks when given none
    install="npm install -g @openai/codex",
    version=("--version",),
    usage=CodexReader,
    signs=ClientSigns(
        # "ERROR: Reconnecting... waiting for network" at 3 s, 11 s, 24 s, ...,
        # forever; a numbered "Reconnecting... 2/5" ends by itself.
        unreachable=r"Reconnecting\.\.\. waiting for network",
        reports=2,
        window=2,
        fix=_NETWORK_FIX,
    ),
    says=Says(
        throttle=(r"rate.?limit", r"\b429\b"),
        # "You've hit your usage limit. Try again at 3:05 PM."
        quota=(r"you['\u2019]?ve hit your (\S+ )?(usage )?limit",),
        # OpenAI's hard cap: a 429 that says "exceeded your current quota ... billing details".
        billing=(
            r"insufficient_quota",
            r"exceeded your current quota",
            r"billing (details|hard limit)",
        ),
    ),
    # codex's own sandbox cannot nest in gitrun's: it makes mount points
    # (.agents, .codex) in the repository, which is read-only there.
    # gitrun's bubblewrap alone holds its writes to the task's paths.
    when_confined=(
        ("workspace-write", "danger-full-access"),
        ("sandbox_mode=workspace-write", "sandbox_mode=danger-full-access"),
    ),
    # Confined by gitrun, its commands would get the network its own keeps from them.
    own_sandbox="workers are not confined by gitrun: codex's own sandbox holds them "
    '(isolation = "sandbox" confines codex by gitrun\'s alone, which cannot keep the '
    "network from its commands)",
    # `codex exec resume` takes no --sandbox: its -c value, not TOML, is read as text.
    # Its conversation: $CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl.
    resume=Resume(
        argv=(
            "codex", "exec", "resume", "--model", "{model}", "-c",
            "sandbox_mode=workspace-write", "--json", "{conversation}", "{pointer}",
        ),
        home=("CODEX_HOME", ".codex"),
        stored="sessions/*/*/*/rollout-*-{conversation}.jsonl",
        turn=r'"type":"function_call"',
        drop=("--ephemeral",),
        said=r'"type":"thread\.started","thread_id":"([0-9A-Za-z-]+)"',
    ),
)
GEMINI = Preset(
    name="gemini",
    program="gemini",
    # --skip-trust: a fresh folder is untrusted, which downgrades yolo to
    # default approvals (or exits 55).
    argv=(
        "gemini", "--model", "{model}", "--skip-trust", "--approval-mode", "yolo",
        "--output-format", "json", "--prompt", "{pointer}",
    ),
    default_model="gemini-2.5-pro",  # gemini-cli 0.61's DEFAULT_GEMINI_MODEL
    install="npm install -g @google/gemini-cli",
    version=("--version",),
    usage=GeminiReader,
    signs=ClientSigns(
        exits={
            41: "an authentication error; set GEMINI_API_KEY (or the auth type in "
            "~/.gemini/settings.json)",
            52: "a configuration error; fix gemini's settings.json",
            55: "because the folder is not trusted; pass --skip-trust (the gemini preset does)",
        },
        # "Attempt 2 failed. Retrying with backoff... Error: exception TypeError:
        # fetch failed sending request", then a stack trace of ten lines.
        unreachable=r"\bfetch failed\b",
        reports=2,
        window=12,
        fix=_NETWORK_FIX,
    ),
    # "Quota exceeded. Please retry in 41.220713462s."
    says=Says(throttle=(r"\b429\b",), quota=(r"\bquota exceeded\b",)),
    # --resume takes the whole id its --session-id was given (its help names
    # only "latest" and an index). The conversation: under $GEMINI_CLI_HOME
    # (else $HOME), .gemini/tmp/<project>/chats/session-<time>-<first 8 of
    # the id>.jsonl; a message that called tools holds "toolCalls".
    resume=Resume(
        argv=(
            "gemini", "--model", "{model}", "--skip-trust", "--approval-mode", "yolo",
            "--output-format", "json", "--resume", "{conversation}", "--prompt", "{pointer}",
        ),
        home=("GEMINI_CLI_HOME", ""),
        stored=".gemini/tmp/*/chats/session-*-{conversation:.8}.jsonl",
        turn=r'"toolCalls":\[\{',
        given=("--session-id", "{conversation}"),
    ),
)
AIDER = Preset(
    name="aider",
    program="aider",
    # --no-git: aider `git add`s what it creates even with --no-auto-commits,
    # leaving outputs staged in the user's index. The history, gitignore and
    # repo-map flags keep it from writing .aider* files and .gitignore; the
    # update, URL, release-notes and model-warning flags keep it from
    # installing things or waiting on a browser; --read hands it the packet
    # and every input read-only (it has no tool to open files itself).
    argv=(
        "aider", "--model", "{model}", "--no-git", "--no-gitignore", "--no-auto-commits",
        "--yes-always", "--chat-history-file", "/dev/null", "--input-history-file", "/dev/null",
        "--map-tokens", "0", "--no-check-update", "--no-detect-urls", "--no-show-release-notes",
        "--no-show-model-warnings", "--no-analytics", "--no-pretty", "--no-stream",
        "--no-fancy-input", "--no-suggest-shell-commands", "--read", "{packet}",
        "{inputs:--read}", "--message", "{pointer}",
    ),
    default_model="sonnet",  # aider's alias for its Claude Sonnet default
    install="python -m pip install aider-chat",
    version=("--version",),
    usage=AiderReader,
    signs=ClientSigns(
        # "litellm.InternalServerError: ... OpenAIException - Connection error.",
        # wrapped at 80 columns, "The API provider's servers are down or
        # overloaded." (not a rate limit) and "Retrying in 0.5 seconds...".
        unreachable=r"\bConnection\s+(?:error|refused)|APIConnectionError",
        reports=3,
        window=12,
        fix=_NETWORK_FIX,
    ),
    # It passes on its provider's words (litellm's RateLimitError, ...).
    says=Says(throttle=(r"rate.?limit", r"\b429\b")),
)
# fmt: on
# `sh -c <[executor] shell>`: nothing substituted into the script, which
# reads "$GITRUN_POINTER"; it gets no model unless its author sets one.
SHELL = Preset(name="shell", program="sh", argv=("sh", "-c"), default_model=None, script=True)

PRESETS: Mapping[str, Preset] = MappingProxyType(
    {p.name: p for p in (CLAUDE, CODEX, GEMINI, AIDER, SHELL)}
)
SHELL_PRESET = SHELL.name
DEFAULT = CLAUDE  # what `gitrun new` launches when given no preset
# The client that leads an external run: the plugin, the hooks and the skills
# are Claude Code's (gitrun.guard.plugin names it too, a floor below).
LEAD = CLAUDE
_BY_PROGRAM = {p.program: p for p in PRESETS.values() if not p.script}


def preset(name: str) -> Preset:
    """The record of preset ``name``; an error naming the known ones for any other."""
    found = PRESETS.get(name)
    if found is None:
        raise UsageError(f"preset {name!r} is unknown; use one of {', '.join(PRESETS)}")
    return found


def find_preset(name: str | None) -> Preset | None:
    """The record of preset ``name``, or None (no preset, or an unknown one,
    which ``check`` reports)."""
    return PRESETS.get(name or "")


def client_of(argv: Sequence[str]) -> Preset | None:
    """The agent client an argv runs (by its program's name), when gitrun knows it."""
    return _BY_PROGRAM.get(PurePath(argv[0]).name) if argv else None


def client_signs(argv: Sequence[str]) -> tuple[str, ClientSigns] | None:
    """The client an argv runs and its signs, when gitrun knows them."""
    client = client_of(argv)
    if client is None or client.signs is None:
        return None
    return client.program, client.signs


def usage_reader(argv: Sequence[str]) -> UsageReader | None:
    """The reader of the client an argv runs, when gitrun knows how it reports usage."""
    client = client_of(argv)
    if client is None or client.usage is None:
        return None
    return client.usage(asked_model(argv))
