"""The scripted mock of the Messages API that the real-client tests drive."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.realclient.mockmodel import Failure, MockModel, Text, ToolUse, Turn, Usage, say, write

TOOLS = [{"name": "Write", "input_schema": {"type": "object"}}]


def _post(url: str, body: dict[str, Any], path: str = "/v1/messages?beta=true") -> tuple[int, str]:
    parsed = urlparse(url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=10)
    try:
        conn.request("POST", path, json.dumps(body), {"content-type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def _events(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for chunk in text.strip().split("\n\n"):
        name, data = chunk.split("\n")
        assert name.startswith("event: ") and data.startswith("data: ")
        events.append((name[7:], json.loads(data[6:])))
    return events


def test_a_tool_call_streams_as_the_api_streams_it() -> None:
    content = '{"a": [1, 2, "three"]}' * 5
    usage = Usage(input_tokens=1234, output_tokens=56, cache_read_input_tokens=7)
    turn = Turn(
        (Text("Writing."), ToolUse("Write", {"file_path": "/r/o.json", "content": content})), usage
    )
    with MockModel([turn]) as model:
        status, body = _post(model.url, {"model": "m", "stream": True, "tools": TOOLS})
    assert status == 200
    events = _events(body)
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == [
        "message_delta",
        "message_stop",
    ]
    assert all(data["type"] == name for name, data in events)
    start = events[0][1]["message"]
    assert start["usage"]["input_tokens"] == 1234 and start["usage"]["cache_read_input_tokens"] == 7
    blocks = [d["content_block"] for n, d in events if n == "content_block_start"]
    assert blocks[0] == {"type": "text", "text": ""}
    assert (
        blocks[1]["type"] == "tool_use"
        and blocks[1]["name"] == "Write"
        and blocks[1]["input"] == {}
    )
    pieces = [
        d["delta"]["partial_json"]
        for n, d in events
        if n == "content_block_delta" and d["delta"]["type"] == "input_json_delta"
    ]
    assert len(pieces) > 2 and json.loads("".join(pieces)) == turn.blocks[1].input  # type: ignore[union-attr]
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"]["output_tokens"] == 56 and delta["usage"]["input_tokens"] == 1234
    assert model.tool_use_ids() == [blocks[1]["id"]] and blocks[1]["id"].startswith("toolu_")


def test_side_requests_use_no_turn_and_an_ended_script_is_counted() -> None:
    with MockModel([say("first")], side_text="side") as model:
        _, plain = _post(model.url, {"model": "m", "stream": False, "messages": []})
        assert json.loads(plain)["content"] == [{"type": "text", "text": "side"}]
        _, first = _post(model.url, {"model": "m", "stream": False, "tools": TOOLS})
        assert json.loads(first)["content"][0]["text"] == "first"
        assert json.loads(first)["stop_reason"] == "end_turn"
        _post(model.url, {"model": "m", "stream": True, "tools": TOOLS})
        status, counted = _post(model.url, {}, "/v1/messages/count_tokens")
    assert (status, json.loads(counted)) == (200, {"input_tokens": 100})
    assert (model.served_turns, model.overrun, len(model.requests)) == (1, 1, 4)


def test_a_failure_turn_answers_with_an_api_error() -> None:
    with MockModel([Failure(529, "overloaded_error", "Overloaded"), say("ok")]) as model:
        status, body = _post(model.url, {"model": "m", "tools": TOOLS})
        assert status == 529
        assert json.loads(body) == {
            "type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"},
        }
        assert (
            json.loads(_post(model.url, {"model": "m", "tools": TOOLS})[1])["content"][0]["text"]
            == "ok"
        )


def test_tool_results_sent_back_are_read_by_tool_use_id() -> None:
    with MockModel([write("/r/a", "x"), say("done")]) as model:
        _post(model.url, {"model": "m", "tools": TOOLS})
        [call] = model.tool_use_ids()
        result = {
            "type": "tool_result",
            "tool_use_id": call,
            "is_error": True,
            "content": [{"type": "text", "text": "denied by hook"}],
        }
        messages = [{"role": "user", "content": [result]}]
        _post(model.url, {"model": "m", "tools": TOOLS, "messages": messages})
    assert model.tool_result(call) == (True, "denied by hook")
    with pytest.raises(AssertionError, match="never reported"):
        model.tool_result("toolu_other")


def test_the_server_is_bounded_in_requests_and_in_time() -> None:
    with MockModel([], max_requests=2, lifetime=1.0) as model:
        assert _post(model.url, {"model": "m"})[0] == 200
        assert _post(model.url, {"model": "m"})[0] == 200
        status, body = _post(model.url, {"model": "m"})
        assert status == 503 and "budget" in body
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                _post(model.url, {"model": "m"})
            except OSError:
                break  # it shut itself down
            time.sleep(0.1)
        else:
            pytest.fail("the mock model still answered 10 s after its lifetime")
    assert len(model.requests) == 2
