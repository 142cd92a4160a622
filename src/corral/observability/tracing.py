"""OpenTelemetry traces: one tracer for Corral, exporting over OTLP/HTTP only when configured.

Without an endpoint the API's no-op tracer is used, so instrumented code costs next to nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

if TYPE_CHECKING:  # the SDK is imported only by a process that exports traces
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

SESSION_ID = "corral.session_id"
"""The attribute every Corral span carries."""


def tracer() -> trace.Tracer:
    """Corral's tracer (a proxy until `configure_tracing` installs a provider)."""
    return trace.get_tracer("corral")


def configure_tracing(
    url: str, *, service_name: str, exporter: SpanExporter | None = None
) -> TracerProvider:
    """Install a provider exporting to the OTLP/HTTP traces `url` (or `exporter`), in batches.

    Once per process (OpenTelemetry allows one global provider); `shutdown()` it at exit so
    the last spans are sent.
    """
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=url)
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider


@contextmanager
def span(name: str, session_id: str, **attributes: Any) -> Iterator[Span]:
    """A child span of the current one, with the session id; an exception marks it failed."""
    attrs = {SESSION_ID: session_id, **{k: v for k, v in attributes.items() if v is not None}}
    with tracer().start_as_current_span(name, attributes=attrs) as current:
        yield current


def mark_error(current: Span, description: str) -> None:
    """Set an error status on `current` (a failed tool or model call is not an exception)."""
    current.set_status(Status(StatusCode.ERROR, description))
