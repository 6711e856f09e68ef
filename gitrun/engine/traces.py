"""A run's traces, for the tracing tools a team already uses.

Off unless OpenTelemetry's standard variables configure an OTLP endpoint
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,
and neither ``OTEL_SDK_DISABLED=true`` nor ``OTEL_TRACES_EXPORTER=none``):
then a driver makes a span of its drive and one of every attempt, and gives
each worker its attempt's ``TRACEPARENT``, so a client that traces itself
nests its own spans under it. The exporter is the ``otel`` extra
(:mod:`gitrun.engine.otel`, the only module that imports OpenTelemetry);
off, nothing of it is imported and every call here does nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Protocol

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gitrun.engine.states import Ended

ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


class Traces(Protocol):
    """What a driver tells its traces."""

    def attempt_started(self, task: str, attempt: int, started: float) -> dict[str, str]:
        """The worker's environment for its attempt's span (``TRACEPARENT``)."""
        ...

    def attempt_ended(self, ended: Ended) -> None:
        """The attempt's span ends, with the facts its ledger record holds."""
        ...

    def event(self, name: str, attributes: Mapping[str, str | float]) -> None:
        """Something that befell the run (a park, a halt), on its span."""
        ...

    def close(self) -> None:
        """End the run's span and send what is left."""
        ...


class NoTraces:
    """No traces: what a driver holds when none are configured."""

    def attempt_started(self, task: str, attempt: int, started: float) -> dict[str, str]:
        return {}

    def attempt_ended(self, ended: Ended) -> None:
        pass

    def event(self, name: str, attributes: Mapping[str, str | float]) -> None:
        pass

    def close(self) -> None:
        pass


def configured(env: Mapping[str, str]) -> str | None:
    """The variable that configures traces, or None when they are off."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return None
    return next((name for name in ENDPOINTS if env.get(name, "").strip()), None)


def open_traces(run_id: str, tasks: int, report: Callable[[str], None]) -> Traces:
    """The traces of one drive of ``run_id``: OpenTelemetry's when configured
    and installed; when configured but not installed, gitrun says so once
    and runs untraced (a run is never held back by its traces)."""
    by = configured(os.environ)
    if by is None:
        return NoTraces()
    try:
        # deferred: OpenTelemetry is an optional extra (gitrun[otel])
        from gitrun.engine.otel import OtelTraces
    except ImportError:
        report(
            f"traces: {by} is set, but the otel extra is not installed, so this run is not "
            "traced; pip install 'gitrun[otel]'"
        )
        return NoTraces()
    return OtelTraces(run_id, tasks)
