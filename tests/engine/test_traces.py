"""OpenTelemetry traces of a run, received by an OTLP/HTTP server on 127.0.0.1.

A 20-task run with a throttle and a failure is driven with
``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at the receiver; the spans that
arrive are checked one by one against the ledger: one drive, one per
attempt under it, each with the facts its record holds, and every worker's
``TRACEPARENT`` naming its own attempt's span. Skipped, with the reason,
without the otel extra (``pip install '.[otel]'``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import commit_all, ledger_records, run_gitrun, write_run

pytest.importorskip(
    "opentelemetry.exporter.otlp.proto.http",
    reason="the otel extra is not installed: pip install '.[otel]'",
)

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

# One attempt of one task: its output names the TRACEPARENT it was given,
# its usage file what it "used"; t05 is throttled once, t07 never writes.
WORKER = r"""
import json, os, sys
task, attempt = os.environ["GITRUN_TASK"], int(os.environ["GITRUN_ATTEMPT"])
with open(os.environ["GITRUN_USAGE"], "w") as f:
    json.dump({"input": 100, "output": 10 * attempt, "cost_usd": 0.01, "model": "m1"}, f)
flag = os.path.join(os.environ["TRACE_TEST_FLAGS"], task)
if task == "t05" and not os.path.exists(flag):
    open(flag, "w").close()
    print("429 rate limit exceeded")
    sys.exit(75)
if task == "t07":
    print("I could not do it")
    sys.exit(1)
out = os.environ["GITRUN_OUTPUTS"].splitlines()[0]
os.makedirs(os.path.dirname(out), exist_ok=True)
with open(out, "w") as f:
    json.dump({"task": task, "traceparent": os.environ.get("TRACEPARENT")}, f)
"""


class Receiver:
    """The OTLP/HTTP traces endpoint: every span it was sent, decoded."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.resources: list[dict[str, Any]] = []
        received = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource_spans in request.resource_spans:
                    received.resources.append(_attributes(resource_spans.resource.attributes))
                    for scope in resource_spans.scope_spans:
                        received.spans.extend(scope.spans)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    got = Receiver()
    got.thread.start()
    try:
        yield got
    finally:
        got.server.shutdown()
        got.server.server_close()


def _attributes(pairs: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for pair in pairs:
        kind = pair.value.WhichOneof("value")
        found[pair.key] = getattr(pair.value, kind) if kind else None
    return found


def test_a_run_s_trace_holds_a_span_per_attempt_under_its_drive(
    git_repo: Path, tmp_path: Path, receiver: Receiver
) -> None:
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    flags = tmp_path / "flags"
    flags.mkdir()
    tasks = [{"id": f"t{i:02d}", "outputs": [f"out/t{i:02d}.json"]} for i in range(1, 21)]
    packet = {
        "executor": {
            "command": [sys.executable, str(worker)],
            "env": {"TRACE_TEST_FLAGS": str(flags)},
        },
        "limits": {
            "concurrency": 4,
            "max_attempts": 2,
            "max_load": 1e6,
            "backoff_base": "0.2s",
            "backoff_cap": "0.5s",
        },
    }
    write_run(git_repo, "r", tasks, packet)
    commit_all(git_repo, "run r")
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_SERVICE_NAME": "batch"}
    proc = run_gitrun(git_repo, "start", "r", env=env)
    assert proc.returncode == 1, (proc.stdout[-3000:], proc.stderr[-3000:])  # t07 failed
    assert "traces:" not in proc.stdout + proc.stderr
    spans = receiver.spans
    (drive,) = [s for s in spans if s.name == "gitrun.drive"]
    attempts = [s for s in spans if s.name == "gitrun.attempt"]
    assert {r.get("service.name") for r in receiver.resources} == {"batch"}
    assert _attributes(drive.attributes) == {"gitrun.run": "r", "gitrun.tasks": 20}
    records = [r for r in ledger_records(git_repo) if "outcome" in r]
    # One span per attempt the ledger records, and nothing else.
    assert len(attempts) == len(records) == len(spans) - 1
    by_try = {}
    for span in attempts:
        facts = _attributes(span.attributes)
        by_try.setdefault((facts["gitrun.task"], facts["gitrun.attempt"]), []).append((span, facts))
    for record in records:
        span, facts = by_try[(record["task"], record["attempt"])].pop(0)
        assert span.trace_id == drive.trace_id and span.parent_span_id == drive.span_id
        assert facts["gitrun.outcome"] == record["outcome"], (facts, record)
        assert facts.get("gitrun.exit_code") == record["exit"], (facts, record)
        usage = record["usage"]
        assert facts["gitrun.tokens.input"] == usage["input"] == 100
        assert facts["gitrun.tokens.output"] == usage["output"]
        assert facts["gitrun.cost_usd"] == pytest.approx(0.01) and facts["gitrun.model"] == "m1"
        assert drive.start_time_unix_nano <= span.start_time_unix_nano < span.end_time_unix_nano
        assert span.end_time_unix_nano <= drive.end_time_unix_nano
    outcomes = sorted(_attributes(s.attributes)["gitrun.outcome"] for s in attempts)
    assert outcomes == sorted(["valid"] * 19 + ["throttled", "missing", "missing"]), outcomes
    # The throttle is an event of its attempt and of the drive.
    (throttled,) = [s for s in attempts if _attributes(s.attributes)["gitrun.task"] == "t05"][:1]
    assert [e.name for e in throttled.events] == ["throttled"]
    assert [(e.name, _attributes(e.attributes)) for e in drive.events] == [
        ("throttled", {"gitrun.task": "t05"})
    ]
    # The failures are errors; a valid attempt is ok (status codes 2 and 1).
    codes = {_attributes(s.attributes)["gitrun.outcome"]: s.status.code for s in attempts}
    assert codes["missing"] == 2 and codes["valid"] == 1 and codes["throttled"] == 0
    # Each worker was told its own attempt's span: a client nests its spans there.
    span_of = {
        _attributes(s.attributes)["gitrun.task"]: s
        for s in attempts
        if _attributes(s.attributes)["gitrun.outcome"] == "valid"
    }
    for task, span in span_of.items():
        told = json.loads((git_repo / f"out/{task}.json").read_text())["traceparent"]
        version, trace_id, span_id, flags = told.split("-")
        assert (version, trace_id, span_id) == ("00", span.trace_id.hex(), span.span_id.hex())
        assert int(flags, 16) & 1, told  # sampled


def test_traces_configured_without_the_extra_say_so_and_the_run_goes_on(
    git_repo: Path, tmp_path: Path
) -> None:
    """The extra missing (its package hidden from this run's interpreter):
    one line says the run is not traced, and it runs as ever."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "opentelemetry").mkdir()
    (hide / "opentelemetry" / "__init__.py").write_text("raise ImportError('hidden')\n")
    write_run(
        git_repo,
        "r",
        [{"id": "t1", "outputs": ["out/t1.json"]}],
        {
            "executor": {"command": ["sh", "-c", "mkdir -p out && echo '{}' > out/t1.json"]},
        },
    )
    commit_all(git_repo, "run r")
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        "PYTHONPATH": os.pathsep.join([str(hide), str(Path(__file__).resolve().parents[2])]),
    }
    proc = run_gitrun(git_repo, "start", "r", env=env)
    assert proc.returncode == 0, proc.stderr
    said = proc.stdout + proc.stderr
    assert (
        "traces: OTEL_EXPORTER_OTLP_ENDPOINT is set, but the otel extra is not installed, so "
        "this run is not traced; pip install 'gitrun[otel]'" in said
    ), said


def test_a_halt_is_an_event_of_the_drive_and_makes_it_an_error(
    git_repo: Path, receiver: Receiver
) -> None:
    """The canary writes nothing: the run halts, and its drive span says so."""
    write_run(
        git_repo,
        "r",
        [{"id": f"t{i}", "outputs": [f"out/t{i}.json"]} for i in (1, 2)],
        {"executor": {"command": ["sh", "-c", "echo nothing to do"]}, "limits": {"canary": 1}},
    )
    commit_all(git_repo, "run r")
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
    proc = run_gitrun(git_repo, "start", "r", env=env)
    assert proc.returncode == 3, (proc.stdout[-2000:], proc.stderr[-2000:])
    (drive,) = [s for s in receiver.spans if s.name == "gitrun.drive"]
    (halt,) = [e for e in drive.events if e.name == "halt"]
    facts = _attributes(halt.attributes)
    assert facts["gitrun.halt"] == "canary" and "canary" in facts["message"], facts
    assert drive.status.code == 2 and "canary" in drive.status.message
    tried = [_attributes(s.attributes) for s in receiver.spans if s.name == "gitrun.attempt"]
    assert {(t["gitrun.task"], t["gitrun.outcome"]) for t in tried} == {("t1", "missing")}


def test_a_park_is_an_event_of_the_drive(git_repo: Path, receiver: Receiver) -> None:
    """A usage limit with its reset 2 s away: the drive's park event names
    the reset the ledger records, and the run goes on after it."""
    from tests.workers.test_refusals import _run, _script

    _run(git_repo, _script(2))
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
    proc = run_gitrun(git_repo, "start", "r", env=env)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    (park,) = [r for r in ledger_records(git_repo) if r.get("event") == "park"]
    (drive,) = [s for s in receiver.spans if s.name == "gitrun.drive"]
    events = [(e.name, _attributes(e.attributes)) for e in drive.events if e.name == "park"]
    assert events == [("park", {"gitrun.until": park["until"], "reason": "usage limit of sh"})]
    assert drive.status.code == 0  # a park is no error
