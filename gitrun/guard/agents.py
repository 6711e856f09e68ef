"""The one worker agent type of external runs: ``gitrun-worker``.

It comes from the gitrun plugin (``gitrun:gitrun-worker``), or from
``.claude/agents/gitrun-worker.md`` for a repository set up with
``gitrun hooks install``; both are the plugin's ``agents/gitrun-worker.md``.

Claude Code loads the agent files of ``.claude/agents/`` when a turn starts:
a file written during the lead's turn is not found in that turn, and in
``-p`` mode never. So gitrun no longer writes an agent file per
leased task (``next --agents`` is gone); one generic ``gitrun-worker`` is
installed before the lead starts, by ``gitrun new --executor external`` and
``gitrun hooks install``. Which task a subagent works on never comes from
its agent type: the lead's hook records the Agent call that dispatched a
pointer (:mod:`gitrun.store.dispatches`), whatever type the lead picked.
"""

from __future__ import annotations

from pathlib import Path

from gitrun.guard.install import PLUGIN, plugin_dir
from gitrun.store.tomlfile import write_atomic

AGENTS_DIR = ".claude/agents"
WORKER_AGENT = "gitrun-worker"


def worker_agent_path(repo: Path) -> Path:
    return repo / AGENTS_DIR / f"{WORKER_AGENT}.md"


def worker_agent_type(repo: Path) -> str:
    """The subagent type a lead in ``repo`` starts a worker as: the
    repository's own agent file when there is one, else the plugin's
    (Claude Code names a plugin's agents ``plugin:agent``)."""
    return WORKER_AGENT if worker_agent_path(repo).is_file() else f"{PLUGIN}:{WORKER_AGENT}"


def install_worker_agent(repo: Path) -> str:
    """Write (or bring up to date) the ``gitrun-worker`` agent; one line saying what it did."""
    path = worker_agent_path(repo)
    text = (plugin_dir() / "agents" / f"{WORKER_AGENT}.md").read_text(encoding="utf-8")
    shown = f"{AGENTS_DIR}/{WORKER_AGENT}.md"
    try:
        if path.read_text(encoding="utf-8") == text:
            return f"{shown}: the {WORKER_AGENT} agent is already there"
    except (OSError, UnicodeDecodeError):
        pass
    write_atomic(path, text.encode())
    return f"{shown}: installed the {WORKER_AGENT} agent (start the lead session after this)"


def uninstall_worker_agent(repo: Path) -> str:
    path = worker_agent_path(repo)
    shown = f"{AGENTS_DIR}/{WORKER_AGENT}.md"
    if not path.exists():
        return f"{shown}: not there; nothing to remove"
    path.unlink()
    return f"{shown}: removed the {WORKER_AGENT} agent"
