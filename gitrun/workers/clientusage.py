"""Reading what an attempt used from its client's own report.

A :class:`UsageReader` reads a worker's output as it comes and, when the
worker has ended, gives its :class:`~gitrun.store.usage.Usage` (None when the
client reported nothing: the cost is unknown, not zero) and, for a client
whose output is JSON, the readable text that stands for the attempt's log
tail. Like :mod:`gitrun.workers.clients`, the reader belongs to the program, not to
the preset: a ``command`` that runs ``claude`` directly is read the same way
(each client's record in :mod:`gitrun.workers.presets` names its reader).

- ``claude -p --output-format json`` prints one object when it ends:
  ``result`` (the final text: the tail), ``is_error``, ``subtype``,
  ``num_turns``, ``total_cost_usd`` (older versions: ``cost_usd``),
  ``usage`` (the Messages API's counts) and ``modelUsage`` (per model, every
  request of the session: tokens and ``costUSD``).
- ``codex exec --json`` prints JSON lines; ``turn.completed`` carries the
  session's ``usage`` so far (``input_tokens``, which includes
  ``cached_input_tokens``, and ``output_tokens``), the last one the whole.
  codex states no cost and names no model.
- ``gemini --output-format json`` prints one object: ``response`` (the
  tail) and ``stats.models.<name>.tokens`` (``prompt``, which includes
  ``cached``, ``candidates``, ``thoughts``, ``tool``). No cost.
- aider prints after each exchange ``Tokens: 2.3k sent, 120 received.``
  and, for a model with a known price, ``Cost: $0.01 message, $0.02
  session.`` Its counts are rounded (to a tenth of a thousand from 1k).

A model the report does not name is the one the argv asked for
(``--model``), which these clients use as given.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gitrun.store.records import Fields, RecordInvalid
from gitrun.store.regular import NotRegular, read_regular
from gitrun.store.usage import KINDS, Usage, is_dollars, is_token_count

MAX_LINE = 8 << 20  # a report line longer than this is not kept (its usage is unknown)
MAX_TEXT = 64 << 10  # characters of readable text kept for the tail


@dataclass(frozen=True)
class Report:
    usage: Usage | None  # None: the client reported nothing
    text: str | None  # the readable output for the tail; None: the output as it is


class UsageReader:
    """Reads output line by line; subclasses read each line in :meth:`line`."""

    def __init__(self, model: str | None = None) -> None:
        self.model = model
        self._partial = bytearray()
        self._overlong = False

    def feed(self, chunk: bytes) -> None:
        data = bytes(self._partial) + chunk if self._partial else chunk
        *complete, rest = data.split(b"\n")
        for raw in complete:
            if self._overlong:
                self._overlong = False  # the end of a line too long to keep
                continue
            self.line(raw.decode("utf-8", errors="replace"))
        self._partial = bytearray(rest)
        if len(self._partial) > MAX_LINE:
            self._partial.clear()
            self._overlong = True

    def finish(self) -> Report:
        if self._partial and not self._overlong:
            self.line(self._partial.decode("utf-8", errors="replace"))
        self._partial.clear()
        return self.report()

    def line(self, text: str) -> None:  # pragma: no cover - every reader has its own
        raise NotImplementedError

    def report(self) -> Report:  # pragma: no cover - every reader has its own
        raise NotImplementedError


def _object(text: str) -> dict[str, Any] | None:
    text = text.strip()
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _last_object(lines: list[str], keys: tuple[str, ...]) -> dict[str, Any] | None:
    """The last JSON object that starts a line of its own among ``lines`` and
    has one of ``keys`` (a client's closing object, printed over many lines)."""
    text = "\n".join(lines)
    decoder = json.JSONDecoder()
    starts = [m.start() + 1 for m in re.finditer(r"\n\{", text)]
    for start in reversed(([0] if text.startswith("{") else []) + starts):
        try:
            value, _ = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict) and any(key in value for key in keys):
            return value
    return None


def _count(value: object) -> int:
    """A token count as a client wrote it; anything else (absent, negative,
    text, past :data:`~gitrun.store.usage.MAX_TOKENS`) is 0."""
    return value if is_token_count(value) else 0  # type: ignore[return-value]  # an int


def _cost(value: object) -> float | None:
    """A cost in US dollars as a client wrote it; None (unknown) unless a
    finite number from 0 to :data:`~gitrun.store.usage.MAX_USD`: an absurd
    cost is refused, never added to the run's spend."""
    return float(value) if is_dollars(value) else None  # type: ignore[arg-type]  # a number


class ClaudeReader(UsageReader):
    """``claude -p --output-format json``: the last ``"type": "result"`` object."""

    def __init__(self, model: str | None = None) -> None:
        super().__init__(model)
        self.result: dict[str, Any] | None = None

    def line(self, text: str) -> None:
        found = _object(text)
        if found is not None and found.get("type") == "result":
            self.result = found

    def report(self) -> Report:
        result = self.result
        if result is None:
            return Report(None, None)
        said = result.get("result")
        text = said if isinstance(said, str) else str(result.get("subtype") or "")
        return Report(self._usage(result), text)

    def _usage(self, result: dict[str, Any]) -> Usage | None:
        cost = _cost(result.get("total_cost_usd", result.get("cost_usd")))
        models = result.get("modelUsage")
        if isinstance(models, dict) and any(isinstance(m, dict) for m in models.values()):
            # Every request of the session, the helper model's too: what the cost covers.
            per = {name: m for name, m in models.items() if isinstance(m, dict)}
            main = max(
                per,
                key=lambda name: (
                    _cost(per[name].get("costUSD")) or 0,
                    _count(per[name].get("outputTokens")),
                ),
            )
            return Usage(
                sum(_count(m.get("inputTokens")) for m in per.values()),
                sum(_count(m.get("outputTokens")) for m in per.values()),
                sum(_count(m.get("cacheReadInputTokens")) for m in per.values()),
                sum(_count(m.get("cacheCreationInputTokens")) for m in per.values()),
                cost,
                main or self.model,
            )
        usage = result.get("usage")
        if isinstance(usage, dict):
            return Usage(
                _count(usage.get("input_tokens")),
                _count(usage.get("output_tokens")),
                _count(usage.get("cache_read_input_tokens")),
                _count(usage.get("cache_creation_input_tokens")),
                cost,
                self.model,
            )
        return Usage(cost_usd=cost, model=self.model) if cost is not None else None


class CodexReader(UsageReader):
    """``codex exec --json``: JSON lines of events; the last ``turn.completed``'s usage."""

    def __init__(self, model: str | None = None) -> None:
        super().__init__(model)
        self.usage: Usage | None = None
        self.events = 0
        self._text: list[str] = []
        self._size = 0

    def line(self, text: str) -> None:
        event = _object(text)
        if event is None or not isinstance(event.get("type"), str):
            self._say(text.rstrip())  # what codex writes to stderr
            return
        self.events += 1
        kind = event["type"]
        if kind == "turn.completed" and isinstance(event.get("usage"), dict):
            self.usage = self._usage(event["usage"])
        elif kind == "turn.failed" and isinstance(event.get("error"), dict):
            self._say(f"turn failed: {event['error'].get('message', '')}")
        elif kind == "error":
            self._say(f"error: {event.get('message', '')}")
        elif kind == "item.completed" and isinstance(event.get("item"), dict):
            item = event["item"]
            if item.get("type") == "agent_message" and isinstance(item.get("text"), str):
                self._say(item["text"])
            elif item.get("type") == "error":
                self._say(f"error: {item.get('message', '')}")

    def _say(self, text: str) -> None:
        if not text:
            return
        self._text.append(text)
        self._size += len(text) + 1
        while self._size > MAX_TEXT and len(self._text) > 1:
            self._size -= len(self._text.pop(0)) + 1

    def _usage(self, usage: dict[str, Any]) -> Usage:
        cached = _count(usage.get("cached_input_tokens"))
        written = _count(usage.get("cache_write_input_tokens"))
        whole = _count(usage.get("input_tokens"))  # the cached input included
        return Usage(
            max(0, whole - cached - written),
            _count(usage.get("output_tokens")),
            cached,
            written,
            None,
            self.model,
        )

    def report(self) -> Report:
        return Report(self.usage, "\n".join(self._text) if self.events else None)


class GeminiReader(UsageReader):
    """``gemini --output-format json``: one object, ``response`` and ``stats``."""

    def __init__(self, model: str | None = None) -> None:
        super().__init__(model)
        self._lines: list[str] = []
        self._size = 0

    def line(self, text: str) -> None:
        # The object is printed indented over many lines: keep the text (bounded).
        self._lines.append(text)
        self._size += len(text) + 1
        if self._size > MAX_LINE:
            self._lines.clear()
            self._size = 0

    def report(self) -> Report:
        found = _last_object(self._lines, ("response", "stats", "error"))
        if found is None:
            return Report(None, None)
        said = found.get("response")
        error = found.get("error")
        if not isinstance(said, str):
            said = str(error.get("message", "")) if isinstance(error, dict) else ""
        return Report(self._usage(found.get("stats")), said)

    def _usage(self, stats: object) -> Usage | None:
        models = stats.get("models") if isinstance(stats, dict) else None
        if not isinstance(models, dict):
            return None
        per = {
            n: m["tokens"]
            for n, m in models.items()
            if isinstance(m, dict) and isinstance(m.get("tokens"), dict)
        }
        if not per:
            return None
        main = max(per, key=lambda n: _count(per[n].get("candidates")))
        cached = sum(_count(t.get("cached")) for t in per.values())
        # "prompt" includes the cached input; "input" (newer versions) does not.
        fresh = sum(
            _count(t["input"])
            if "input" in t
            else max(0, _count(t.get("prompt")) - _count(t.get("cached")))
            for t in per.values()
        )
        return Usage(
            fresh,
            sum(_count(t.get("candidates")) + _count(t.get("thoughts")) for t in per.values()),
            cached,
            0,
            None,
            main or self.model,
        )


_AIDER_TOKENS = re.compile(
    r"Tokens: (?P<sent>[\d.]+k?) sent(?:, (?P<write>[\d.]+k?) cache write)?"
    r"(?:, (?P<hit>[\d.]+k?) cache hit)?, (?P<received>[\d.]+k?) received\."
)
_AIDER_COST = re.compile(r"Cost: \$(?P<message>[\d.]+) message, \$(?P<session>[\d.]+) session\.")


def _aider_count(text: str | None) -> int:
    """aider's rounded count: ``120``, ``2.3k``, ``15k``."""
    if not text:
        return 0
    try:
        count = round(float(text[:-1]) * 1000) if text.endswith("k") else int(text)
    except (ValueError, OverflowError):  # "1.2.3k", or so many digits the float is infinite
        return 0
    return _count(count)


class AiderReader(UsageReader):
    """aider's ``Tokens: ...`` report after each exchange and its ``Cost: ...``
    (on the same line, or the next when both cache counts are shown)."""

    def __init__(self, model: str | None = None) -> None:
        super().__init__(model)
        self.usage: Usage | None = None
        self.session: float | None = None
        self._exchanges = 0
        self._costs = 0

    def line(self, text: str) -> None:
        tokens = _AIDER_TOKENS.search(text)
        if tokens is not None:
            self._exchanges += 1
            hit, write = _aider_count(tokens["hit"]), _aider_count(tokens["write"])
            exchange = Usage(
                max(0, _aider_count(tokens["sent"]) - hit - write),
                _aider_count(tokens["received"]),
                hit,
                write,
                None,
                self.model,
            )
            self.usage = exchange if self.usage is None else self.usage.plus(exchange)
        cost = _AIDER_COST.search(text)
        if cost is not None:
            self._costs += 1
            try:
                self.session = _cost(float(cost["session"]))  # the whole session so far
            except ValueError:
                self.session = None

    def report(self) -> Report:
        if self.usage is None:
            return Report(None, None)
        # A model without a known price gets no Cost line: its cost is unknown.
        priced = self._costs >= self._exchanges and self.session is not None
        return Report(replace(self.usage, cost_usd=self.session if priced else None), None)


def asked_model(argv: Sequence[str]) -> str | None:
    """The model an argv asks its client for (``--model M``, ``-m M``, ``--model=M``)."""
    for i, arg in enumerate(argv[1:], 1):
        if arg in ("--model", "-m") and i + 1 < len(argv) and argv[i + 1]:
            return argv[i + 1]
        if arg.startswith("--model="):
            return arg.partition("=")[2] or None
    return None


# -- the usage file of any worker ----------------------------------------------------------

USAGE_ENV = "GITRUN_USAGE"
_FILE_FIELDS = (*KINDS, "cost_usd", "model", "v")
MAX_FILE = 64 << 10


def read_usage_file(path: Path) -> tuple[Usage | None, str]:
    """(the usage a worker wrote to ``$GITRUN_USAGE``, "") or (None, why it
    cannot be read, a warning); (None, "") when the worker wrote none."""
    try:
        # Never follow a link, never wait on a FIFO or a device the worker put there.
        raw = read_regular(path, follow=False, limit=MAX_FILE + 1)
    except FileNotFoundError:
        return None, ""
    except NotRegular:
        return None, "is not a regular file"
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc}; it must be a regular file)"
    if len(raw) > MAX_FILE:
        return None, f"is over {MAX_FILE // 1024} KiB, where a usage report is one small object"
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return None, f"is not a JSON object ({exc})"
    if not isinstance(value, dict):
        return None, "is not a JSON object"
    unknown = [name for name in value if name not in _FILE_FIELDS]
    if unknown:
        return (
            None,
            f"has the field {unknown[0]!r}, which is none of {', '.join(_FILE_FIELDS[:-1])}",
        )
    if not any(name in value for name in _FILE_FIELDS[:-1]):
        return None, "states no usage (it has none of the fields)"
    if value.get("v", 1) != 1:
        return None, f"has format version {value['v']!r}, where this gitrun reads 1"
    try:
        return Usage.from_json(Fields(value)), ""
    except RecordInvalid as exc:
        return None, f"is not a usage report: {exc}"


def attempt_usage(
    reported: Usage | None, path: Path, task: str, number: int
) -> tuple[Usage | None, str]:
    """(what an attempt used, a warning or ""): the usage file its worker wrote
    at ``path`` wins over its client's own report (``reported``); a file that
    cannot be read leaves the client's report, or unknown, and says why."""
    written, problem = read_usage_file(path)
    if written is not None:
        return written, ""
    if not problem:
        return reported, ""
    return reported, (
        f"{task} attempt {number}: the usage file ${USAGE_ENV} ({path}) {problem}; its usage "
        f"is {'what its client reported' if reported else 'unknown'} (write one JSON object "
        'such as {"input": 1200, "output": 300, "cost_usd": 0.01, "model": "m"})'
    )
