"""A real OTLP/gRPC receiver for tests: what a collector does, in-process.

A collector is a gRPC server implementing OpenTelemetry's TraceService (and
MetricsService); `opentelemetry-proto` ships both definitions. Services started with
`OTEL_EXPORTER_OTLP_ENDPOINT` pointing here export their spans to it over the network,
exactly as to a production collector, and tests read back what arrived.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    span: trace_pb2.Span


class _Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, spans: list[ReceivedSpan]) -> None:
        self._spans = spans

    async def Export(self, request: trace_service_pb2.ExportTraceServiceRequest,
                     context: Any) -> trace_service_pb2.ExportTraceServiceResponse:
        for resource_spans in request.resource_spans:
            service = next((a.value.string_value for a in resource_spans.resource.attributes
                            if a.key == "service.name"), "")
            for scope_spans in resource_spans.scope_spans:
                self._spans.extend(ReceivedSpan(service, s) for s in scope_spans.spans)
        return trace_service_pb2.ExportTraceServiceResponse()


class _Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, names: list[str]) -> None:
        self._names = names

    async def Export(self, request: metrics_service_pb2.ExportMetricsServiceRequest,
                     context: Any) -> metrics_service_pb2.ExportMetricsServiceResponse:
        self._names.extend(m.name for rm in request.resource_metrics
                           for sm in rm.scope_metrics for m in sm.metrics)
        return metrics_service_pb2.ExportMetricsServiceResponse()  # names kept only


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        #: The name of every metric pushed here, once per export.
        self.metric_names: list[str] = []
        self._server = grpc.aio.server()
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Traces(self.spans),
                                                                  self._server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_Metrics(self.metric_names),
                                                                      self._server)
        self.port = 0

    @property
    def env(self) -> dict[str, str]:
        """Environment that makes a service export here, its spans within a moment."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self.port}",
                "OTEL_EXPORTER_OTLP_INSECURE": "true", "OTEL_BSP_SCHEDULE_DELAY": "200"}

    async def start(self) -> None:
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()

    async def stop(self) -> None:
        await self._server.stop(None)
