"""The replicator process: its flows, cluster probes, gRPC status/health and telemetry."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import grpc

from mirrorline.core.errors import ConfigError
from mirrorline.core.settings import MirrorSettings
from mirrorline.grpcserver import ServiceServer
from mirrorline.kafka.clients import admin_kwargs
from mirrorline.kafka.health import ClusterProbe
from mirrorline.replicator.flow import FlowReplicator, FlowState
from mirrorline.replicator.metrics import ReplicationMetrics
from mirrorline.telemetry import Telemetry, setup_telemetry
from mirrorline.v1 import replicator_pb2, replicator_pb2_grpc

log = logging.getLogger(__name__)

_FLOW_STATES = {
    FlowState.STARTING: replicator_pb2.FLOW_STATE_STARTING,
    FlowState.RUNNING: replicator_pb2.FLOW_STATE_RUNNING,
    FlowState.PAUSED: replicator_pb2.FLOW_STATE_PAUSED,
    FlowState.ERROR: replicator_pb2.FLOW_STATE_ERROR,
    FlowState.STOPPED: replicator_pb2.FLOW_STATE_ERROR,
}
_PARTITION_STATES = {
    "running": replicator_pb2.PARTITION_STATE_RUNNING,
    "paused": replicator_pb2.PARTITION_STATE_PAUSED,
    "error": replicator_pb2.PARTITION_STATE_ERROR,
    "stopped": replicator_pb2.PARTITION_STATE_PAUSED,
}


class ReplicatorService:
    def __init__(self, settings: MirrorSettings, *, worker_id: str = "replicator",
                 targets: Sequence[str] | None = None, grpc_host: str = "127.0.0.1",
                 grpc_port: int = 0, metrics_host: str = "127.0.0.1",
                 metrics_port: int | None = 0) -> None:
        self.settings = settings
        self.worker_id = worker_id
        self._targets = tuple(targets) if targets else None
        self._grpc = ServiceServer(name=f"replicator {worker_id}", host=grpc_host,
                                   port=grpc_port)
        self._metrics_host, self._metrics_port = metrics_host, metrics_port
        self.telemetry: Telemetry | None = None
        self.flows: list[FlowReplicator] = []
        self.probes: dict[str, ClusterProbe] = {}
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def grpc_port(self) -> int | None:
        return self._grpc.port

    async def start(self) -> None:
        flows = self.settings.enabled_flows(self._targets)
        if not flows:
            which = f" targeting {', '.join(self._targets)}" if self._targets else ""
            raise ConfigError(None, f"no enabled replication flow{which}: set "
                                    "'<source>-><target>.enabled = true'",
                              source=self.settings.source_path)
        self.telemetry = setup_telemetry("replicator", instance=self.worker_id,
                                         metrics_port=self._metrics_port,
                                         metrics_host=self._metrics_host)
        await self.telemetry.start()
        metrics = ReplicationMetrics(self.telemetry.meter)
        self.flows = [FlowReplicator(f, worker_id=self.worker_id, metrics=metrics,
                                     tracer=self.telemetry.tracer) for f in flows]
        for settings in flows:
            for alias, cfg in ((settings.source, settings.clients.source_admin),
                               (settings.target, settings.clients.target_admin)):
                if alias not in self.probes:
                    kwargs, _ = admin_kwargs(cfg)
                    kwargs = dict(kwargs, client_id=f"replicator-{self.worker_id}|probe")
                    self.probes[alias] = ClusterProbe(alias, kwargs)
        self._grpc.add(replicator_pb2_grpc.add_ReplicatorServicer_to_server,
                       _ReplicatorServicer(self),
                       [replicator_pb2.DESCRIPTOR.services_by_name["Replicator"].full_name])
        await self._grpc.start()
        for probe in self.probes.values():
            probe.start()
        for flow in self.flows:
            self._tasks.append(asyncio.create_task(flow.start(), name=f"start {flow.name}"))
        self._tasks.append(asyncio.create_task(self._health_loop(), name="health"))
        log.info("replicator %s: gRPC %s, metrics %s, flows %s", self.worker_id,
                 self._grpc.port, self.telemetry.metrics_port,
                 ", ".join(f.name for f in self.flows))

    async def stop(self) -> None:
        await self._grpc.set_serving(False)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(f.stop() for f in self.flows), return_exceptions=True)
        await asyncio.gather(*(p.stop() for p in self.probes.values()), return_exceptions=True)
        await self._grpc.stop()
        if self.telemetry is not None:
            await self.telemetry.stop()

    def serving(self) -> bool:
        return (all(p.reachable for p in self.probes.values())
                and all(f.healthy for f in self.flows))

    async def _health_loop(self) -> None:
        while True:
            await self._grpc.set_serving(self.serving())
            await asyncio.sleep(1.0)

    def status(self) -> replicator_pb2.ReplicatorStatus:
        out = replicator_pb2.ReplicatorStatus(worker_id=self.worker_id, serving=self.serving())
        for alias, probe in sorted(self.probes.items()):
            out.clusters.add(alias=alias, reachable=bool(probe.reachable),
                             error=probe.error or "")
        for flow in self.flows:
            views = flow.partitions()
            problems = "; ".join(f"{t}: {why}" for t, why in sorted(flow.problems.items()))
            out.flows.add(flow=flow.name, state=_FLOW_STATES[flow.state],
                          error=flow.error or problems, partitions=len(views))
            for v in views:
                out.partitions.add(
                    flow=v.flow, source_topic=v.source_topic, target_topic=v.target_topic,
                    partition=v.partition,
                    source_end_offset=-1 if v.source_end_offset is None else v.source_end_offset,
                    next_offset=v.next_offset,
                    lag_records=-1 if v.lag is None else v.lag,
                    last_replication_latency_ms=-1.0 if v.last_latency_ms is None
                    else v.last_latency_ms,
                    state=_PARTITION_STATES.get(v.state,
                                                replicator_pb2.PARTITION_STATE_UNSPECIFIED),
                    error=v.error or "", records_replicated=v.records_replicated)
        return out


class _ReplicatorServicer(replicator_pb2_grpc.ReplicatorServicer):
    def __init__(self, service: ReplicatorService) -> None:
        self._service = service

    async def GetStatus(self, request: replicator_pb2.GetReplicatorStatusRequest,
                        context: grpc.aio.ServicerContext[
                            replicator_pb2.GetReplicatorStatusRequest,
                            replicator_pb2.ReplicatorStatus]
                        ) -> replicator_pb2.ReplicatorStatus:
        return self._service.status()


