"""One telemetry setup for every Mirrorline service: OTel traces and metrics.

Each service calls `setup_telemetry` once at start. Metrics are always available on a
Prometheus scrape endpoint of the service's own (an asyncio HTTP listener, no thread);
traces and metrics are also exported over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set,
metrics not if `OTEL_METRICS_EXPORTER=none` (the OTel SDK's exporters run their own
background threads, and the final flush at stop runs on a daemon thread of its own; that
is the only place Mirrorline uses threads, and only when OTLP export is configured).

Nothing here touches OTel's process-global providers: services receive their meter and
tracer explicitly, so several services can share a process in tests without clobbering
each other's registries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from dataclasses import dataclass, field

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON
from prometheus_client import CollectorRegistry

from mirrorline import __version__
from mirrorline.telemetry.prometheus import PrometheusEndpoint

log = logging.getLogger(__name__)

OTLP_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
#: OpenTelemetry's standard switch: `none` keeps metrics off OTLP (traces still go), for a
#: set-up whose Prometheus scrapes every service itself -- pushing the same metrics to a
#: collector that re-exposes them would give each series twice.
METRICS_EXPORTER_ENV = "OTEL_METRICS_EXPORTER"
#: How long a stopping service waits for its telemetry to reach the OTLP collector.
FLUSH_TIMEOUT_S = 2.0


@dataclass
class Telemetry:
    """Handles for one service: pass `meter`/`tracer` down; `start()`/`stop()` the endpoint."""

    service: str
    meter: metrics.Meter
    tracer: trace.Tracer
    endpoint: PrometheusEndpoint | None
    _meter_provider: MeterProvider
    _tracer_provider: TracerProvider
    otlp_endpoint: str | None = None
    _started: bool = field(default=False, repr=False)

    @property
    def metrics_port(self) -> int | None:
        return self.endpoint.port if self.endpoint else None

    async def start(self) -> None:
        if self.endpoint is not None and not self._started:
            await self.endpoint.start()
        self._started = True

    async def stop(self, flush_timeout: float = FLUSH_TIMEOUT_S) -> None:
        if self.endpoint is not None:
            await self.endpoint.stop()
        if self.otlp_endpoint is None:  # nothing to flush: cheap, and no thread needed
            self._shutdown_providers()
            return
        # Shutting down flushes the OTLP exporters, which blocks until the collector
        # answers or the exporter's own timeout passes: off the event loop, and bounded,
        # so an unreachable collector cannot hold a service's stop.
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def finish() -> None:
            if not done.done():
                done.set_result(None)

        def shutdown() -> None:
            try:
                self._shutdown_providers()
            finally:
                with contextlib.suppress(RuntimeError):  # the loop may be gone by then
                    loop.call_soon_threadsafe(finish)

        threading.Thread(target=shutdown, name=f"{self.service} telemetry flush",
                         daemon=True).start()
        try:
            await asyncio.wait_for(asyncio.shield(done), flush_timeout)
        except TimeoutError:
            log.warning("telemetry not flushed to %s within %.0fs; the newest spans and "
                        "metrics of %s are dropped", self.otlp_endpoint, flush_timeout,
                        self.service)

    def _shutdown_providers(self) -> None:
        self._tracer_provider.shutdown()
        self._meter_provider.shutdown()


def setup_telemetry(service: str, *, instance: str, metrics_port: int | None = 0,
                    metrics_host: str = "127.0.0.1") -> Telemetry:
    """Create this service's meter and tracer.

    `metrics_port=None` disables the Prometheus endpoint; 0 picks a free port.
    """
    resource = Resource.create({
        "service.name": f"mirrorline-{service}",
        "service.namespace": "mirrorline",
        "service.instance.id": instance,
        "service.version": __version__,
    })
    otlp = os.environ.get(OTLP_ENV) or None
    readers: list[MetricReader] = []
    endpoint: PrometheusEndpoint | None = None
    if metrics_port is not None:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader

        registry = CollectorRegistry(auto_describe=False)
        readers.append(PrometheusMetricReader(registry=registry))
        endpoint = PrometheusEndpoint(registry, host=metrics_host, port=metrics_port)
    push_metrics = otlp is not None and \
        os.environ.get(METRICS_EXPORTER_ENV, "otlp").strip().lower() != "none"
    if push_metrics:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    tracer_provider = TracerProvider(resource=resource, sampler=ALWAYS_ON if otlp else ALWAYS_OFF)
    if otlp:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        log.info("%s: exporting traces%s over OTLP to %s", service,
                 " and metrics" if push_metrics else "", otlp)
    return Telemetry(
        service=service,
        meter=meter_provider.get_meter("mirrorline", __version__),
        tracer=tracer_provider.get_tracer("mirrorline", __version__),
        endpoint=endpoint,
        _meter_provider=meter_provider,
        _tracer_provider=tracer_provider,
        otlp_endpoint=otlp,
    )
