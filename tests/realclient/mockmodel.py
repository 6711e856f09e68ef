"""A scripted stand-in for the Anthropic Messages API on 127.0.0.1.

Real agent CLIs (Claude Code) talk to it through ``ANTHROPIC_BASE_URL``
with a dummy key and no network. Each request of the agent loop (one that
offers tools) is answered with the next scripted :class:`Turn`: tool calls
streamed the way the real API streams them (``message_start``, ``ping``,
``content_block_start`` with ``tool_use``, ``input_json_delta`` in pieces,
``content_block_stop``, ``message_delta`` with ``stop_reason`` and usage,
``message_stop``), or a closing text. Requests without tools (titles,
summaries, helper prompts) get ``side_text`` and use no turn.

A lead that launches subagents talks to the model in several conversations
at once, in an order no test controls. ``agents`` maps a key to the script
of one subagent: a request whose first user message (the prompt the lead
passed to its Agent tool) contains the key is answered from that script,
every other request from the main one. Each script keeps its own place.
A script may also be a :data:`Brain`: a function that picks each turn from
the request itself (the whole conversation so far), for a lead that reacts
to what gitrun printed; it runs under the server's lock, so it must not
call back into the model.

Everything received is recorded, so a test can read what the client sent
back: :meth:`MockModel.tool_result` is what the model was told about one of
its tool calls (the hook's denial, an error, the output of a command).

Bounded: the server answers at most ``max_requests`` requests, shuts itself
down after ``lifetime`` seconds, and stops when its ``with`` block ends.
Stdlib only.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "claude-mock-1"


@dataclass(frozen=True)
class ToolUse:
    """The model calls a tool: ``name`` with ``input``; ``id`` is made up when empty."""

    name: str
    input: dict[str, Any]
    id: str = ""


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Usage:
    """Token counts as the API reports them: input and cache counts in
    ``message_start``, the final output count (and the same input counts)
    in ``message_delta``."""

    input_tokens: int = 100
    output_tokens: int = 20
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


@dataclass(frozen=True)
class Turn:
    """One assistant message. It stops with ``tool_use`` when it calls a tool,
    else with ``end_turn``."""

    blocks: tuple[ToolUse | Text, ...]
    usage: Usage = Usage()

    @property
    def stop_reason(self) -> str:
        return "tool_use" if any(isinstance(b, ToolUse) for b in self.blocks) else "end_turn"


@dataclass(frozen=True)
class Failure:
    """The API refuses this request: ``status`` with an Anthropic error body
    (429 ``rate_limit_error``, 529 ``overloaded_error``, ...)."""

    status: int = 429
    type: str = "rate_limit_error"
    message: str = "Server is temporarily limiting requests (not your usage limit)"
    headers: tuple[tuple[str, str], ...] = ()  # e.g. retry-after, x-should-retry


def write(path: str, content: str) -> Turn:
    return Turn((ToolUse("Write", {"file_path": path, "content": content}),))


def edit(path: str, old: str, new: str) -> Turn:
    return Turn((ToolUse("Edit", {"file_path": path, "old_string": old, "new_string": new}),))


def bash(command: str, description: str = "Run a command") -> Turn:
    return Turn((ToolUse("Bash", {"command": command, "description": description}),))


def say(text: str) -> Turn:
    return Turn((Text(text),))


def agent(
    prompt: str, description: str = "Work on a task", kind: str = "", *, wait: bool = False
) -> ToolUse:
    """One Agent tool call (several in one :class:`Turn` run in parallel);
    ``kind`` is the ``subagent_type`` (left out when empty). With ``wait``
    the call returns when the subagent does (``run_in_background: false``)
    instead of at once, with a notification when it ends."""
    tool_input: dict[str, Any] = {"description": description, "prompt": prompt}
    if kind:
        tool_input["subagent_type"] = kind
    if wait:
        tool_input["run_in_background"] = False
    return ToolUse("Agent", tool_input)


def agents(*calls: ToolUse) -> Turn:
    return Turn(tuple(calls))


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any

    @property
    def first_prompt(self) -> str:
        """The text of the conversation's first user message: the ``-p``
        prompt for the lead, the Agent tool's prompt for a subagent."""
        if not isinstance(self.body, dict):
            return ""
        for message in self.body.get("messages") or []:
            if isinstance(message, dict) and message.get("role") == "user":
                return _text_of(message.get("content"))
        return ""

    @property
    def tool_names(self) -> list[str]:
        tools = self.body.get("tools") if isinstance(self.body, dict) else None
        return [str(t.get("name")) for t in tools or [] if isinstance(t, dict)]

    @property
    def is_agent_turn(self) -> bool:
        """A request of the agent loop: a Messages call that offers tools."""
        return (
            self.method == "POST"
            and self.path.split("?")[0] == "/v1/messages"
            and isinstance(self.body, dict)
            and bool(self.body.get("tools"))
        )


Brain = Callable[[Request], "Turn | Failure"]


@dataclass
class _Script:
    turns: list[Turn | Failure]
    served: int = 0
    overrun: int = 0
    brain: Brain | None = None  # picks each turn; ``turns`` then records them


def _script(turns: Sequence[Turn | Failure] | Brain) -> _Script:
    return _Script([], brain=turns) if callable(turns) else _Script(list(turns))


@dataclass
class _State:
    main: _Script
    max_requests: int
    side_text: str
    agents: dict[str, _Script] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    ids: int = 0
    # The usage of every message served (agent turns and side requests), by model.
    served: list[tuple[str, Usage]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class QuietServer(ThreadingHTTPServer):
    """The mock servers' HTTP server: a client that hung up is no error.

    Reporting one would print a traceback from the request's thread, which
    may outlive its test; Python 3.11's traceback parses source lines with
    ast, and two threads building ASTs at once can fail the other with
    "AST constructor recursion depth mismatch" (CPython gh-106905)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client killed mid-request (a test's SIGKILL) is no error of the mock's."""
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class MockModel:
    """``with MockModel([write(...), say("done")]) as model:`` then point the
    client at ``model.url``."""

    def __init__(
        self,
        script: Sequence[Turn | Failure] | Brain,
        *,
        agents: dict[str, Sequence[Turn | Failure] | Brain] | None = None,
        max_requests: int = 50,
        lifetime: float = 120.0,
        side_text: str = "none",
    ) -> None:
        scripts = {key: _script(turns) for key, turns in (agents or {}).items()}
        self._state = _State(_script(script), max_requests, side_text, scripts)
        self._lifetime = lifetime
        self._server = QuietServer(("127.0.0.1", 0), _handler(self._state))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> MockModel:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _serve(self) -> None:
        deadline = threading.Timer(self._lifetime, self._server.shutdown)
        deadline.daemon = True
        deadline.start()
        try:
            self._server.serve_forever(poll_interval=0.05)
        finally:
            deadline.cancel()
            self._server.server_close()  # from now on a connection is refused at once

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=10)
        self._server.server_close()

    # -- what the client sent ------------------------------------------------

    @property
    def requests(self) -> list[Request]:
        with self._state.lock:
            return list(self._state.requests)

    @property
    def served_turns(self) -> int:
        """How many scripted turns were answered."""
        return self._state.main.served

    @property
    def overrun(self) -> int:
        """Agent-loop requests that came after the script ran out."""
        return self._state.main.overrun

    @property
    def served_usage(self) -> dict[str, Usage]:
        """The tokens of every message served, summed by the model it was served as."""
        found: dict[str, Usage] = {}
        with self._state.lock:
            for model, usage in self._state.served:
                old = found.get(model, Usage(0, 0, 0, 0))
                found[model] = Usage(
                    old.input_tokens + usage.input_tokens,
                    old.output_tokens + usage.output_tokens,
                    old.cache_creation_input_tokens + usage.cache_creation_input_tokens,
                    old.cache_read_input_tokens + usage.cache_read_input_tokens,
                )
        return found

    def served_of(self, key: str) -> int:
        """How many turns of the subagent script ``key`` were answered."""
        return self._state.agents[key].served

    def overrun_of(self, key: str) -> int:
        return self._state.agents[key].overrun

    def conversation(self, key: str) -> list[Request]:
        """The agent-loop requests answered from the subagent script ``key``."""
        return [r for r in self.requests if r.is_agent_turn and key in r.first_prompt]

    def tool_results(self) -> dict[str, list[dict[str, Any]]]:
        """Every ``tool_result`` block the client sent back, by ``tool_use_id``
        (a result is sent again with each later request; the last copy wins)."""
        found: dict[str, list[dict[str, Any]]] = {}
        for request in self.requests:
            for block in _blocks(request.body):
                if block.get("type") == "tool_result":
                    found[str(block.get("tool_use_id"))] = [block]
        return found

    def tool_result(self, tool_use_id: str) -> tuple[bool, str]:
        """(is_error, text) of what the model was told about one tool call."""
        blocks = self.tool_results().get(tool_use_id)
        if not blocks:
            raise AssertionError(f"the client never reported a result for {tool_use_id}")
        block = blocks[-1]
        return bool(block.get("is_error")), _text_of(block.get("content"))

    def tool_use_ids(self) -> list[str]:
        """The ids of the tool calls served so far, in order."""
        return self.tool_use_ids_of(None)

    def tool_use_ids_of(self, key: str | None) -> list[str]:
        """The ids of the tool calls served from the subagent script ``key``
        (None: the main one)."""
        with self._state.lock:
            script = self._state.main if key is None else self._state.agents[key]
            return _ids(script.turns[: script.served])

    def tool_uses(self) -> list[ToolUse]:
        """The tool calls served from the main script, in order."""
        with self._state.lock:
            turns = self._state.main.turns[: self._state.main.served]
        return [b for t in turns if isinstance(t, Turn) for b in t.blocks if isinstance(b, ToolUse)]


def _ids(turns: Sequence[Turn | Failure]) -> list[str]:
    return [
        b.id
        for turn in turns
        if isinstance(turn, Turn)
        for b in turn.blocks
        if isinstance(b, ToolUse)
    ]


def _blocks(body: Any) -> Iterator[dict[str, Any]]:
    if not isinstance(body, dict):
        return
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            yield from (b for b in content if isinstance(b, dict))


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _pieces(text: str, count: int = 3) -> list[str]:
    """Split JSON text the way the API streams it: in arbitrary fragments."""
    size = max(1, -(-len(text) // count))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _stream(message_id: str, model: str, turn: Turn) -> bytes:
    usage = turn.usage
    start_usage = {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
        "output_tokens": 1,
        "service_tier": "standard",
    }
    events = [
        _sse(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                },
            },
        ),
        _sse("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(turn.blocks):
        if isinstance(block, Text):
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": piece} for piece in _pieces(block.text, 2)]
        else:
            start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": piece}
                for piece in ["", *_pieces(json.dumps(block.input))]
            ]
        events.append(
            _sse(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        for delta in deltas:
            events.append(
                _sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        events.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": turn.stop_reason, "stop_sequence": None},
                "usage": {
                    "input_tokens": usage.input_tokens,
                    "cache_creation_input_tokens": usage.cache_creation_input_tokens,
                    "cache_read_input_tokens": usage.cache_read_input_tokens,
                    "output_tokens": usage.output_tokens,
                },
            },
        )
    )
    events.append(_sse("message_stop", {"type": "message_stop"}))
    return b"".join(events)


def _message(message_id: str, model: str, turn: Turn) -> dict[str, Any]:
    content: list[dict[str, Any]] = [
        {"type": "text", "text": b.text}
        if isinstance(b, Text)
        else {"type": "tool_use", "id": b.id, "name": b.name, "input": b.input}
        for b in turn.blocks
    ]
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": turn.stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": turn.usage.input_tokens,
            "cache_creation_input_tokens": turn.usage.cache_creation_input_tokens,
            "cache_read_input_tokens": turn.usage.cache_read_input_tokens,
            "output_tokens": turn.usage.output_tokens,
        },
    }


def _handler(state: _State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the requests are recorded, not printed

        def _record(self, body: Any) -> Request | None:
            request = Request(self.command, self.path, dict(self.headers), body)
            with state.lock:
                if len(state.requests) >= state.max_requests:
                    return None
                state.requests.append(request)
            return request

        def _send(
            self,
            status: int,
            body: bytes,
            content_type: str,
            headers: tuple[tuple[str, str], ...] = (),
        ) -> None:
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, data: Any) -> None:
            self._send(status, json.dumps(data).encode(), "application/json")

        def _refuse(self) -> None:
            self._json(
                503,
                {
                    "type": "error",
                    "error": {"type": "api_error", "message": "mock model: request budget spent"},
                },
            )

        def do_GET(self) -> None:
            if self._record(None) is None:
                return self._refuse()
            self._json(404, {"type": "error", "error": {"type": "not_found_error"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw.decode(errors="replace")
            request = self._record(body)
            if request is None:
                return self._refuse()
            path = self.path.split("?")[0]
            if path == "/v1/messages/count_tokens":
                return self._json(200, {"input_tokens": 100})
            if path != "/v1/messages" or not isinstance(body, dict):
                return self._json(404, {"type": "error", "error": {"type": "not_found_error"}})
            turn = self._next_turn(request)
            if isinstance(turn, Failure):
                error = {"type": "error", "error": {"type": turn.type, "message": turn.message}}
                return self._send(
                    turn.status, json.dumps(error).encode(), "application/json", turn.headers
                )
            with state.lock:
                state.ids += 1
                message_id = f"msg_mock_{state.ids:04d}"
            model = str(body.get("model") or MODEL)
            with state.lock:
                state.served.append((model, turn.usage))
            if body.get("stream"):
                self._send(200, _stream(message_id, model, turn), "text/event-stream")
            else:
                self._json(200, _message(message_id, model, turn))

        def _next_turn(self, request: Request) -> Turn | Failure:
            if not request.is_agent_turn:
                return say(state.side_text)
            with state.lock:
                prompt = request.first_prompt
                for key, script in state.agents.items():
                    if key in prompt:
                        return _serve(script, state, request)
                return _serve(state.main, state, request)

    return Handler


def _serve(script: _Script, state: _State, request: Request) -> Turn | Failure:
    """The next turn of a script (the caller holds the lock)."""
    if script.brain is not None:
        script.turns.append(script.brain(request))
    if script.served >= len(script.turns):
        script.overrun += 1
        return say("The script has ended.")
    turn = script.turns[script.served]
    if isinstance(turn, Turn):
        turn = _with_ids(turn, state)
        script.turns[script.served] = turn
    script.served += 1
    return turn


def _with_ids(turn: Turn, state: _State) -> Turn:
    blocks: list[ToolUse | Text] = []
    for block in turn.blocks:
        if isinstance(block, ToolUse) and not block.id:
            state.ids += 1
            block = ToolUse(block.name, block.input, f"toolu_mock_{state.ids:04d}")
        blocks.append(block)
    return Turn(tuple(blocks), turn.usage)
