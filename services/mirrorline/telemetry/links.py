"""Span links from the W3C trace context carried in record headers.

A replicated batch carries records of many producers, each possibly with its own trace.
OpenTelemetry's messaging conventions link a batch span to every message's context
instead of choosing one parent, so a canary's trace (or any traced record's) shows its
replication. Only done when the span is recorded: scanning headers costs time on the
data path, and an unrecorded span would drop the links anyway.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR: Final = TraceContextTextMapPropagator()
_HEADER: Final = "traceparent"
#: Links per span at most (a batch of thousands of traced records would flood a backend).
MAX_LINKS: Final = 32


def trace_contexts(headers_of: Iterable[Sequence[tuple[str, bytes | None]]],
                   limit: int = MAX_LINKS) -> list[trace.SpanContext]:
    """Valid span contexts found in `traceparent` headers, distinct, at most `limit`."""
    found: dict[tuple[int, int], trace.SpanContext] = {}
    for headers in headers_of:
        for name, value in headers:
            if name != _HEADER or value is None:
                continue
            try:
                carrier = {_HEADER: value.decode("ascii")}
            except UnicodeDecodeError:
                continue
            context = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
            if context.is_valid:
                found.setdefault((context.trace_id, context.span_id), context)
                if len(found) >= limit:
                    return list(found.values())
    return list(found.values())


def link_records(span: trace.Span, records: Iterable[Any]) -> None:
    """Link `span` to the trace context of each record that carries one."""
    if not span.is_recording():
        return
    for context in trace_contexts(r.headers for r in records):
        span.add_link(context, {"messaging.operation.type": "process"})
