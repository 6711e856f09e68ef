"""A bounded, scripted model server on 127.0.0.1, the base of the OpenAI and
Gemini mocks (``openai_mock.py``, ``gemini_mock.py``).

A script is a list of turns: :class:`Call` (the model calls one of the
client's tools) or :class:`Reply` (it answers in text, which ends the
client's loop). Each request of the agent loop takes the next turn; a
request after the script ran out gets ``Reply("The script has ended.")`` and
counts as an overrun. Everything received is recorded for the test to read.

Bounded: at most ``max_requests`` requests are answered (later ones get 503),
the server shuts itself down after ``lifetime`` seconds, and it stops when
its ``with`` block ends; from then on a connection is refused at once.
Stdlib only.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.realclient.mockmodel import QuietServer


@dataclass(frozen=True)
class Call:
    """The model calls tool ``name`` with ``args``; ``id`` is made up when
    empty; ``namespace``: the group of tools it is in (codex offers an MCP
    server's tools as one namespace)."""

    name: str
    args: dict[str, Any]
    id: str = ""
    namespace: str = ""


@dataclass(frozen=True)
class Reply:
    text: str


@dataclass(frozen=True)
class Refuse:
    """The API refuses this request: ``status``, a JSON ``body``, ``headers``."""

    status: int
    body: dict[str, Any]
    headers: tuple[tuple[str, str], ...] = ()


Turn = Call | Reply | Refuse


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(cls, data: Any, status: int = 200) -> Answer:
        return cls(status, "application/json", json.dumps(data).encode())

    @classmethod
    def sse(cls, chunks: list[bytes]) -> Answer:
        return cls(200, "text/event-stream", b"".join(chunks))


@dataclass
class _State:
    script: list[Turn]
    max_requests: int
    requests: list[Request] = field(default_factory=list)
    served: int = 0
    overrun: int = 0
    ids: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class ScriptedServer:
    """Subclasses answer one request in :meth:`answer`."""

    def __init__(
        self, script: Sequence[Turn], *, max_requests: int = 50, lifetime: float = 120.0
    ) -> None:
        self._state = _State(list(script), max_requests)
        self._lifetime = lifetime
        self._server = QuietServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def __enter__(self) -> ScriptedServer:
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
            self._server.server_close()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=10)
        self._server.server_close()

    # -- for subclasses ----------------------------------------------------------

    def answer(self, request: Request) -> Answer:  # pragma: no cover - abstract
        raise NotImplementedError

    def next_turn(self) -> Turn:
        """The next scripted turn, with a made-up id for a call that has none."""
        state = self._state
        with state.lock:
            if state.served >= len(state.script):
                state.overrun += 1
                return Reply("The script has ended.")
            turn = state.script[state.served]
            if isinstance(turn, Call) and not turn.id:
                state.ids += 1
                turn = Call(turn.name, turn.args, f"call_mock_{state.ids:04d}", turn.namespace)
                state.script[state.served] = turn
            state.served += 1
            return turn

    def new_id(self, prefix: str) -> str:
        with self._state.lock:
            self._state.ids += 1
            return f"{prefix}_{self._state.ids:04d}"

    # -- what the client sent ----------------------------------------------------

    @property
    def requests(self) -> list[Request]:
        with self._state.lock:
            return list(self._state.requests)

    @property
    def served_turns(self) -> int:
        return self._state.served

    @property
    def overrun(self) -> int:
        return self._state.overrun

    def _record(self, request: Request) -> bool:
        with self._state.lock:
            if len(self._state.requests) >= self._state.max_requests:
                return False
            self._state.requests.append(request)
            return True


def _handler(server: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the requests are recorded, not printed

        def _handle(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode(errors="replace")
            request = Request(self.command, self.path, dict(self.headers), body)
            if not server._record(request):
                answer = Answer.json({"error": {"message": "mock: request budget spent"}}, 503)
            else:
                answer = server.answer(request)
            self.send_response(answer.status)
            for name, value in answer.headers:
                self.send_header(name, value)
            self.send_header("content-type", answer.content_type)
            self.send_header("content-length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

        do_GET = do_POST = _handle

    return Handler
