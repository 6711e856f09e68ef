"""A scripted stand-in for the Gemini API (generativelanguage v1beta).

gemini-cli 0.61 with ``GOOGLE_GEMINI_BASE_URL`` (http is allowed for
127.0.0.1) and the ``gemini-api-key`` auth type sends
``POST /v1beta/models/<model>:streamGenerateContent?alt=sse`` with
``contents``, ``systemInstruction`` and its tools (``write_file``,
``replace``, ``run_shell_command``, ...) as ``functionDeclarations``. Each
event is ``data: <GenerateContentResponse>``: a candidate whose parts hold a
``functionCall`` (``name``, ``args``) or ``text``. The result of a call
comes back in the next request as a ``functionResponse`` part. Helper
requests without tools (``generateContent``) get ``side_text``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tests.realclient.scripted import (
    Answer,
    Call,
    Refuse,
    Reply,
    Request,
    ScriptedServer,
    Turn,
)

MODEL = "gemini-mock"
# What gemini-cli's helper prompts (e.g. "who speaks next") accept as an answer.
SIDE_TEXT = json.dumps({"reasoning": "The task is done.", "next_speaker": "user"})


def write_file(path: str, content: str) -> Call:
    return Call("write_file", {"file_path": path, "content": content})


def run_shell(command: str) -> Call:
    return Call("run_shell_command", {"command": command, "description": "Run a command"})


class GeminiMock(ScriptedServer):
    """``with GeminiMock([write_file(...), Reply("done")]) as api:``; base URL ``api.url``."""

    def __init__(self, script: Sequence[Turn], *, side_text: str = SIDE_TEXT, **kw: Any) -> None:
        super().__init__(script, **kw)
        self.side_text = side_text

    def answer(self, request: Request) -> Answer:
        path = request.path.split("?")[0]
        body = request.body if isinstance(request.body, dict) else {}
        if request.method != "POST":
            return Answer.json({"error": {"code": 404, "message": "mock: not found"}}, 404)
        if path.endswith(":countTokens"):
            return Answer.json({"totalTokens": 100})
        agent = bool(body.get("tools"))
        turn = self.next_turn() if agent else Reply(self.side_text)
        if isinstance(turn, Refuse):  # the API's error body, as gemini reads it
            return Answer.json(turn.body, turn.status)
        if path.endswith(":streamGenerateContent"):
            return Answer.sse([f"data: {json.dumps(self._response(turn))}\r\n\r\n".encode()])
        if path.endswith(":generateContent"):
            return Answer.json(self._response(turn))
        return Answer.json({"error": {"code": 404, "message": f"mock: no route {path}"}}, 404)

    def function_responses(self) -> list[dict[str, Any]]:
        """Every ``functionResponse`` gemini sent back (each once, in order)."""
        seen: list[dict[str, Any]] = []
        for request in self.requests:
            body = request.body if isinstance(request.body, dict) else {}
            for content in body.get("contents") or []:
                for part in content.get("parts") or [] if isinstance(content, dict) else []:
                    response = part.get("functionResponse") if isinstance(part, dict) else None
                    if isinstance(response, dict) and response not in seen:
                        seen.append(response)
        return seen

    def _response(self, turn: Turn) -> dict[str, Any]:
        if isinstance(turn, Call):
            part: dict[str, Any] = {"functionCall": {"name": turn.name, "args": turn.args}}
        else:
            part = {"text": turn.text}
        return {
            "candidates": [
                {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": {
                "promptTokenCount": 100,
                "candidatesTokenCount": 20,
                "totalTokenCount": 120,
            },
            "modelVersion": MODEL,
            "responseId": self.new_id("gemini_mock"),
        }
