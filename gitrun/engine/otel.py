"""OpenTelemetry traces of a drive (the ``otel`` extra; see :mod:`gitrun.engine.traces`).

One span for the drive (``gitrun.drive``), a child for every attempt
(``gitrun.attempt``), started when the worker is and ended with what the
ledger records of it: task, attempt, outcome, exit or signal, tokens and
cost. A throttle is an event of its attempt and of the drive; a park and a
halt are events of the drive. Exported over OTLP/HTTP by a batch processor
(the exporter reads the standard ``OTEL_EXPORTER_OTLP_*`` variables itself,
the resource ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``); what
a drive killed with SIGKILL had not sent yet is lost with it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, Status, StatusCode, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

import gitrun
from gitrun.store.events import Event, Outcome

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gitrun.engine.states import Ended

_NS = 1_000_000_000
# Outcomes that are the task's failure (a throttle, an interruption, a lost
# node or a worker that never started are not: no attempt is held against it).
_FAILED = {Outcome.MISSING, Outcome.INVALID}


def _ns(seconds: float) -> int:
    return int(seconds * _NS)


class OtelTraces:  # a gitrun.engine.traces.Traces
    def __init__(self, run_id: str, tasks: int) -> None:
        facts = {"service.version": gitrun.__version__}
        named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get(
            "OTEL_RESOURCE_ATTRIBUTES", ""
        )
        if not named:  # the user's name wins over gitrun's
            facts["service.name"] = "gitrun"
        resource = Resource.create(facts)
        self._provider = TracerProvider(resource=resource)
        self._provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self._tracer = self._provider.get_tracer("gitrun", gitrun.__version__)
        self._run = run_id
        self._drive = self._tracer.start_span(
            "gitrun.drive", attributes={"gitrun.run": run_id, "gitrun.tasks": tasks}
        )
        self._attempts: dict[tuple[str, int], Span] = {}

    def attempt_started(self, task: str, attempt: int, started: float) -> dict[str, str]:
        span = self._tracer.start_span(
            "gitrun.attempt",
            context=set_span_in_context(self._drive),
            start_time=_ns(started),
            attributes={"gitrun.run": self._run, "gitrun.task": task, "gitrun.attempt": attempt},
        )
        self._attempts[(task, attempt)] = span
        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier, context=set_span_in_context(span))
        return {name.upper(): value for name, value in carrier.items()}  # TRACEPARENT

    def attempt_ended(self, ended: Ended) -> None:
        span = self._attempts.pop((ended.task, ended.attempt), None)
        if span is None:
            return  # an attempt an earlier driver started: no span of this drive
        facts: dict[str, str | int | float | bool] = {"gitrun.outcome": ended.outcome}
        if ended.reason:
            facts["gitrun.reason"] = ended.reason
        if ended.exit_code is not None:
            facts["gitrun.exit_code"] = ended.exit_code
        if ended.signal is not None:
            facts["gitrun.signal"] = ended.signal
        if ended.timed_out:
            facts["gitrun.timed_out"] = True
        usage = ended.usage
        if usage is not None:
            facts["gitrun.tokens.input"] = usage.input
            facts["gitrun.tokens.output"] = usage.output
            facts["gitrun.tokens.cache_read"] = usage.cache_read
            facts["gitrun.tokens.cache_write"] = usage.cache_write
            if usage.cost_usd is not None:
                facts["gitrun.cost_usd"] = usage.cost_usd
            if usage.model:
                facts["gitrun.model"] = usage.model
        span.set_attributes(facts)
        if ended.outcome == Outcome.THROTTLED:
            at = _ns(ended.ended)
            span.add_event("throttled", timestamp=at)
            self._drive.add_event("throttled", {"gitrun.task": ended.task}, timestamp=at)
        if ended.outcome == Outcome.VALID:
            span.set_status(Status(StatusCode.OK))
        elif ended.outcome in _FAILED:
            span.set_status(Status(StatusCode.ERROR, ended.reason or ended.outcome))
        span.end(end_time=_ns(ended.ended))

    def event(self, name: str, attributes: Mapping[str, str | float]) -> None:
        self._drive.add_event(name, dict(attributes))
        if name == Event.HALT:
            self._drive.set_status(Status(StatusCode.ERROR, str(attributes.get("message", ""))))

    def close(self) -> None:
        for span in self._attempts.values():  # a drive stopped with attempts out
            span.end()
        self._attempts.clear()
        self._drive.end()
        self._provider.force_flush()
        self._provider.shutdown()
