"""Each client's usage report, read from output shaped as the real clients print it.

The shapes were captured from the versions in README.md's compatibility
table against the mock model servers in tests/realclient/.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitrun.store.usage import Usage
from gitrun.workers.clientusage import (
    MAX_LINE,
    AiderReader,
    ClaudeReader,
    CodexReader,
    GeminiReader,
    read_usage_file,
)
from gitrun.workers.presets import usage_reader

# claude -p --output-format json (Claude Code 2.1.332), one line, after a line on stderr.
CLAUDE = (
    '[claude-code:unrecognized_model] {"model":"claude-mock-1","query_source":"sdk"}\n'
    '{"duration_api_ms":29,"stop_reason":"end_turn","session_id":"86f7697e","total_cost_usd":0.0079,'
    '"usage":{"input_tokens":1000,"cache_creation_input_tokens":300,"cache_read_input_tokens":7000,'
    '"output_tokens":50,"output_tokens_details":{"thinking_tokens":0},"server_tool_use":'
    '{"web_search_requests":0,"web_fetch_requests":0},"service_tier":"standard"},"modelUsage":'
    '{"claude-mock-1":{"inputTokens":1000,"outputTokens":50,"cacheReadInputTokens":7000,'
    '"cacheCreationInputTokens":300,"webSearchRequests":0,"costUSD":0.0079,"contextWindow":1000000}},'
    '"permission_denials":[],"terminal_reason":"completed","is_error":false,"num_turns":1,'
    '"subtype":"success","api_error_status":null,"result":"hello","type":"result","duration_ms":142}\n'
)
# The same client refused with 429: its result is the API's message, its usage zero.
CLAUDE_429 = (
    '{"total_cost_usd":0,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,'
    '"cache_read_input_tokens":0,"output_tokens":0},"modelUsage":{},"is_error":true,"num_turns":1,'
    '"subtype":"success","api_error_status":429,"result":"API Error: Request rejected (429) · '
    'Server is temporarily limiting requests (not your usage limit)","type":"result"}\n'
)
# codex exec --json (codex-cli 0.171.0): two requests of 100 input and 20 output tokens.
CODEX = """{"type":"thread.started","thread_id":"01a22dbb"}
{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata for `gpt-mock` not found."}}
{"type":"turn.started"}
{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc 'echo hi > x.txt'","aggregated_output":"","exit_code":null,"status":"in_progress"}}
{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"/bin/bash -lc 'echo hi > x.txt'","aggregated_output":"","exit_code":0,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_2","type":"agent_message","text":"Wrote it."}}
{"type":"turn.completed","usage":{"input_tokens":200,"cached_input_tokens":60,"cache_write_input_tokens":0,"output_tokens":40,"reasoning_output_tokens":10}}
Reading additional input from stdin...
"""
# gemini --output-format json (gemini-cli 0.61.0), indented, after its warnings on stderr.
GEMINI_STATS = {
    "models": {
        "gemini-mock": {
            "api": {"totalRequests": 2, "totalErrors": 0},
            "tokens": {
                "input": 150,
                "prompt": 200,
                "candidates": 40,
                "total": 255,
                "cached": 50,
                "thoughts": 15,
                "tool": 0,
            },
        }
    },
    "tools": {"totalCalls": 1},
}
GEMINI = (
    "Warning: 256-color support not detected.\nYOLO mode is enabled.\n"
    + json.dumps({"session_id": "543f", "response": "Wrote it.", "stats": GEMINI_STATS}, indent=2)
    + "\n"
)
# aider 0.86.2, --no-pretty: a report after each exchange.
AIDER_PRICED = """Aider v0.86.2
Model: openai/gpt-4o-mini with whole edit format
Tokens: 2.3k sent, 120 received. Cost: $0.00042 message, $0.00042 session.
Applied edit to out/t1.json
Tokens: 15k sent, 1.2k cache write, 800 cache hit, 95 received.
Cost: $0.01 message, $0.02 session.
"""
AIDER_UNPRICED = "Tokens: 100 sent, 20 received.\nApplied edit to out/t1.json\n"


def _read(
    reader: ClaudeReader | CodexReader | GeminiReader | AiderReader, text: str, size: int = 7
):
    """Feed ``text`` in pieces of ``size`` bytes, as a pipe hands it over."""
    data = text.encode()
    for i in range(0, len(data), size):
        reader.feed(data[i : i + size])
    return reader.finish()


def test_claude_s_closing_object_gives_tokens_cost_model_and_the_result_as_the_tail() -> None:
    report = _read(ClaudeReader("sonnet"), CLAUDE)
    assert report.usage == Usage(1000, 50, 7000, 300, 0.0079, "claude-mock-1")
    assert report.text == "hello"


def test_claude_s_model_usage_covers_every_model_and_names_the_costliest() -> None:
    result = json.loads(CLAUDE.splitlines()[1])
    result["modelUsage"]["claude-haiku-mock"] = {
        "inputTokens": 10, "outputTokens": 900, "cacheReadInputTokens": 0,
        "cacheCreationInputTokens": 0, "costUSD": 0.0001,
    }  # fmt: skip
    result["total_cost_usd"] = 0.008
    report = _read(ClaudeReader(), json.dumps(result) + "\n")
    assert report.usage == Usage(1010, 950, 7000, 300, 0.008, "claude-mock-1")


def test_claude_without_model_usage_reads_usage_and_the_older_cost_field() -> None:
    result = json.loads(CLAUDE.splitlines()[1])
    del result["modelUsage"], result["total_cost_usd"]
    result["cost_usd"] = 0.5
    report = _read(ClaudeReader("sonnet"), json.dumps(result))  # no final newline
    assert report.usage == Usage(1000, 50, 7000, 300, 0.5, "sonnet")


def test_a_claude_api_error_keeps_its_message_as_the_tail_and_reports_zero() -> None:
    report = _read(ClaudeReader("sonnet"), CLAUDE_429)
    assert "temporarily limiting requests" in (report.text or "")
    assert report.usage == Usage(0, 0, 0, 0, 0.0, "sonnet")


@pytest.mark.parametrize(
    "output",
    [
        "",
        "Hello, I wrote the file.\n",  # --output-format text
        '{"type":"result","result":"cut sh',  # killed mid-write
        '{"type":"assistant","message":{}}\n',  # not the closing object
        "[1, 2]\n",
    ],
)
def test_claude_without_a_closing_object_reports_nothing_and_keeps_its_output(output: str) -> None:
    report = _read(ClaudeReader("sonnet"), output)
    assert report.usage is None and report.text is None


def test_claude_s_report_with_damaged_fields_counts_what_it_can() -> None:
    result = {"type": "result", "result": 7, "subtype": "error_max_turns", "total_cost_usd": "x"}
    result["usage"] = {"input_tokens": -5, "output_tokens": 3.5, "cache_read_input_tokens": 4}
    report = _read(ClaudeReader(), json.dumps(result) + "\n")
    assert report.usage == Usage(0, 0, 4, 0, None, None)
    assert report.text == "error_max_turns"


def test_an_overlong_line_is_dropped_not_hoarded() -> None:
    reader = ClaudeReader()
    reader.feed(b'{"type":"result","result":"' + b"x" * (MAX_LINE + 10))
    reader.feed(b'"}\n')
    assert reader.finish().usage is None
    assert len(reader._partial) == 0


def test_codex_s_last_turn_gives_tokens_with_cached_input_apart_and_no_cost() -> None:
    report = _read(CodexReader("gpt-mock"), CODEX)
    assert report.usage == Usage(140, 40, 60, 0, None, "gpt-mock")
    assert report.text is not None
    assert report.text.splitlines() == [
        "error: Model metadata for `gpt-mock` not found.",
        "Wrote it.",
        "Reading additional input from stdin...",
    ]


def test_codex_s_turn_totals_are_cumulative_so_the_last_one_counts() -> None:
    second = CODEX.replace('"input_tokens":200', '"input_tokens":500').replace(
        '"output_tokens":40', '"output_tokens":90'
    )
    turn = next(ln for ln in second.splitlines() if "turn.completed" in ln)
    report = _read(CodexReader(), CODEX + turn + "\n")
    assert report.usage == Usage(440, 90, 60, 0, None, None)


def test_codex_failures_and_plain_text_output() -> None:
    failed = (
        '{"type":"turn.started"}\n'
        '{"type":"error","message":"Reconnecting... 1/5"}\n'
        '{"type":"turn.failed","error":{"message":"stream disconnected"}}\n'
    )
    report = _read(CodexReader(), failed)
    assert report.usage is None  # no turn completed: nothing reported
    assert report.text == "error: Reconnecting... 1/5\nturn failed: stream disconnected"
    plain = _read(CodexReader(), "codex\nhello\ntokens used\n1,234\n")  # without --json
    assert plain.usage is None and plain.text is None


def test_gemini_s_closing_object_gives_tokens_and_the_response_as_the_tail() -> None:
    report = _read(GeminiReader("gemini-2.5-pro"), GEMINI, size=13)
    assert report.usage == Usage(150, 55, 50, 0, None, "gemini-mock")
    assert report.text == "Wrote it."


def test_gemini_before_the_input_count_subtracts_the_cached_from_the_prompt() -> None:
    stats = json.loads(json.dumps(GEMINI_STATS))
    del stats["models"]["gemini-mock"]["tokens"]["input"]
    text = json.dumps({"response": "ok", "stats": stats}, indent=2)
    assert _read(GeminiReader(), text).usage == Usage(150, 55, 50, 0, None, "gemini-mock")


def test_gemini_s_error_object_and_output_without_one() -> None:
    error = json.dumps(
        {"error": {"type": "FatalAuthenticationError", "message": "no key"}}, indent=2
    )
    report = _read(GeminiReader(), "Loaded cached credentials.\n" + error + "\n")
    assert report.text == "no key" and report.usage is None
    text = _read(GeminiReader(), "Wrote it.\n{not json\n")
    assert text.usage is None and text.text is None


def test_aider_s_reports_add_up_and_the_session_cost_is_the_total() -> None:
    report = _read(AiderReader("openai/gpt-4o-mini"), AIDER_PRICED)
    # 2.3k sent; then 15k sent of which 1.2k written to and 800 read from the cache.
    assert report.usage == Usage(2300 + 13000, 215, 800, 1200, 0.02, "openai/gpt-4o-mini")
    assert report.text is None  # aider's output is text: the tail stays as it is


def test_aider_without_a_price_reports_tokens_and_an_unknown_cost() -> None:
    report = _read(AiderReader("openai/gpt-mock"), AIDER_UNPRICED)
    assert report.usage == Usage(100, 20, 0, 0, None, "openai/gpt-mock")
    assert _read(AiderReader(), "Aider v0.86.2\nno exchange at all\n").usage is None


def test_the_reader_follows_the_program_and_takes_the_asked_model() -> None:
    assert isinstance(usage_reader(["/opt/bin/claude", "-p", "x", "--model", "opus"]), ClaudeReader)
    codex = usage_reader(["codex", "exec", "--model=gpt-5", "x"])
    assert isinstance(codex, CodexReader) and codex.model == "gpt-5"
    aider = usage_reader(["aider", "-m", "sonnet"])
    assert isinstance(aider, AiderReader) and aider.model == "sonnet"
    assert usage_reader(["sh", "-c", "claude -p x"]) is None
    assert usage_reader([]) is None


def test_a_usage_file_in_the_documented_shape_is_read(tmp_path: Path) -> None:
    path = tmp_path / "usage.json"
    path.write_text('{"input": 1200, "output": 300, "cost_usd": 0.01, "model": "m"}')
    assert read_usage_file(path) == (Usage(1200, 300, 0, 0, 0.01, "m"), "")
    path.write_text('{"v": 1, "output": 5, "cache_read": 2, "cache_write": 1, "cost_usd": null}')
    assert read_usage_file(path) == (Usage(0, 5, 2, 1, None, None), "")
    assert read_usage_file(tmp_path / "none.json") == (None, "")  # none written: unknown


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"", "is not a JSON object"),
        (b"{input: 3}", "is not a JSON object"),
        (b"\xff\xfe", "is not a JSON object"),
        (b"[1]", "is not a JSON object"),
        (b"{}", "states no usage"),
        (b'{"inputs": 3}', "has the field 'inputs'"),
        (b'{"input": -3}', "field 'input'"),
        (b'{"cost_usd": "0.1"}', "field 'cost_usd'"),
        (b'{"v": 2, "input": 1}', "format version 2"),
        (b"[" * 100_000 + b"]" * 100_000, "over 64 KiB"),
        (b"[" * 30_000 + b"]" * 30_000, "is not a JSON object"),
    ],
)
def test_a_malformed_usage_file_is_one_sentence_never_a_crash(
    tmp_path: Path, body: bytes, said: str
) -> None:
    path = tmp_path / "usage.json"
    path.write_bytes(body)
    usage, problem = read_usage_file(path)
    assert usage is None and said in problem


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_a_usage_file_that_is_no_regular_file_is_refused_without_waiting(
    tmp_path: Path, kind: str
) -> None:
    """A worker that leaves a FIFO at $GITRUN_USAGE once hung the driver, which
    opened it to read and waited for a writer forever."""
    import os

    path = tmp_path / "usage.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        (tmp_path / "real.json").write_text('{"input": 1}')
        path.symlink_to(tmp_path / "real.json")
    else:
        path.mkdir()
    usage, problem = read_usage_file(path)
    assert usage is None and ("regular file" in problem), problem
