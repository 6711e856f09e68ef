"""A scripted stand-in for the OpenAI API: Responses (codex) and Chat Completions (aider).

codex 0.171 with a custom provider (``model_providers.<id>.wire_api =
"responses"``) sends ``POST <base_url>/responses`` with ``stream: true``,
its tools (``exec_command``, ``write_stdin``, ...) and the conversation as
``input`` items; it reads server-sent events: ``response.created``, each
output item in ``response.output_item.done`` (a ``function_call`` with
``call_id``, ``name`` and JSON ``arguments``, or an assistant ``message``),
then ``response.completed``. The result of a call comes back in the next
request as a ``function_call_output`` item.

aider 0.86 with ``--openai-api-base`` sends ``POST <base>/chat/completions``
(``--no-stream``: one JSON answer). It has no tools: a :class:`Reply` that
holds a *file listing* (the path on one line, then the whole file in a
fence) is how it writes a file (:func:`whole_file`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from typing import Any

from tests.realclient.scripted import Answer, Call, Refuse, Reply, Request, ScriptedServer, Turn

MODEL = "gpt-mock"


def shell(command: str) -> Call:
    """codex runs ``command`` with its ``exec_command`` tool."""
    return Call("exec_command", {"cmd": command})


def whole_file(path: str, content: str, note: str = "Here is the file.") -> Reply:
    """An aider answer in its *whole* edit format: it writes ``path``."""
    return Reply(f"{note}\n\n{path}\n```\n{content}\n```\n")


class OpenAIMock(ScriptedServer):
    """``with OpenAIMock([shell("..."), Reply("done")]) as api:``; base URL ``api.url + "/v1"``.

    Every answer reports ``usage`` the way the API does: Responses with
    ``input_tokens`` (the cached ones included, also given apart in
    ``input_tokens_details.cached_tokens``) and ``output_tokens`` (reasoning
    included); Chat Completions with ``prompt_tokens`` and ``completion_tokens``.
    """

    def __init__(
        self,
        script: Sequence[Turn],
        *,
        input_tokens: int = 100,
        cached_tokens: int = 0,
        output_tokens: int = 20,
        reasoning_tokens: int = 0,
        **kw: Any,
    ) -> None:
        super().__init__(script, **kw)
        self.tokens = (input_tokens, cached_tokens, output_tokens, reasoning_tokens)
        self.answered = 0  # answers that reported usage
        self._counting = threading.Lock()

    def answer(self, request: Request) -> Answer:
        path = request.path.split("?")[0]
        body = request.body if isinstance(request.body, dict) else {}
        if request.method == "GET" and path.endswith("/models"):
            return Answer.json({"object": "list", "data": []})
        if request.method == "POST" and path.endswith("/responses"):
            turn = self.next_turn() if body.get("tools") else Reply("none")
            if isinstance(turn, Refuse):
                return Answer(
                    turn.status, "application/json", json.dumps(turn.body).encode(), turn.headers
                )
            return Answer.sse(self._response_events(turn))
        if request.method == "POST" and path.endswith("/chat/completions"):
            turn = self.next_turn()
            if body.get("stream"):
                return Answer.sse(self._chat_chunks(turn, str(body.get("model") or MODEL)))
            return Answer.json(self._chat_completion(turn, str(body.get("model") or MODEL)))
        return Answer.json({"error": {"message": f"mock: no route for {path}"}}, 404)

    # -- what the client sent back ----------------------------------------------------

    def function_outputs(self) -> dict[str, str]:
        """Every ``function_call_output`` codex sent, by ``call_id`` (the last copy wins)."""
        found: dict[str, str] = {}
        for request in self.requests:
            body = request.body if isinstance(request.body, dict) else {}
            for item in body.get("input") or []:
                if isinstance(item, dict) and item.get("type") == "function_call_output":
                    output = item.get("output")
                    found[str(item.get("call_id"))] = (
                        output if isinstance(output, str) else json.dumps(output)
                    )
        return found

    def call_ids(self) -> list[str]:
        return [t.id for t in self._state.script[: self.served_turns] if isinstance(t, Call)]

    # -- Responses -------------------------------------------------------------------------

    def _response_events(self, turn: Turn) -> list[bytes]:
        response_id = self.new_id("resp_mock")
        if isinstance(turn, Call):
            item: dict[str, Any] = {
                "type": "function_call",
                "id": self.new_id("fc_mock"),
                "call_id": turn.id,
                "name": turn.name,
                "arguments": json.dumps(turn.args),
                "status": "completed",
            }
            if turn.namespace:
                item["namespace"] = turn.namespace
        else:
            item = {
                "type": "message",
                "id": self.new_id("msg_mock"),
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
            }
        whole, cached, output, reasoning = self.tokens
        usage = {
            "input_tokens": whole,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": whole + output,
        }
        with self._counting:
            self.answered += 1
        return [
            _event("response.created", {"response": {"id": response_id, "status": "in_progress"}}),
            _event("response.output_item.added", {"output_index": 0, "item": item}),
            _event("response.output_item.done", {"output_index": 0, "item": item}),
            _event(
                "response.completed",
                {"response": {"id": response_id, "status": "completed", "usage": usage}},
            ),
        ]

    # -- Chat Completions --------------------------------------------------------------------

    def _chat_completion(self, turn: Turn, model: str) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": None}
        finish = "stop"
        if isinstance(turn, Call):
            message["tool_calls"] = [_tool_call(turn)]
            finish = "tool_calls"
        else:
            message["content"] = turn.text
        return {
            "id": self.new_id("chatcmpl_mock"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": self._chat_usage(),
        }

    def _chat_usage(self) -> dict[str, int]:
        whole, _cached, output, _reasoning = self.tokens
        with self._counting:
            self.answered += 1
        return {"prompt_tokens": whole, "completion_tokens": output, "total_tokens": whole + output}

    def _chat_chunks(self, turn: Turn, model: str) -> list[bytes]:
        whole = self._chat_completion(turn, model)
        message = whole["choices"][0]["message"]
        delta = {k: v for k, v in message.items() if v is not None}
        if "tool_calls" in delta:
            delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(delta["tool_calls"])]
        base = {k: whole[k] for k in ("id", "created", "model")} | {
            "object": "chat.completion.chunk"
        }
        first = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        last = {
            **base,
            "choices": [
                {"index": 0, "delta": {}, "finish_reason": whole["choices"][0]["finish_reason"]}
            ],
            "usage": whole["usage"],
        }
        return [_data(first), _data(last), b"data: [DONE]\n\n"]


def _tool_call(turn: Call) -> dict[str, Any]:
    return {
        "id": turn.id,
        "type": "function",
        "function": {"name": turn.name, "arguments": json.dumps(turn.args)},
    }


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def _data(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()
