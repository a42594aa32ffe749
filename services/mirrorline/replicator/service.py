"""The replicator process: flows, cluster probes, gRPC status/health and telemetry.

Two modes:
* standalone -- every enabled flow of the file, each discovering its own topics (one
  process mirrors everything; no controller needed);
* worker (`--worker`) -- whatever the control log assigns to this worker id, under a
  controller that balances partitions across workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

import grpc
from opentelemetry.metrics import Meter

from mirrorline.core.errors import ConfigError
from mirrorline.core.settings import MirrorSettings
from mirrorline.grpcserver import ServiceServer
from mirrorline.kafka.clients import admin_kwargs
from mirrorline.kafka.health import ClusterProbe
from mirrorline.replicator.exactly_once import TargetUnreachable, check_exactly_once
from mirrorline.replicator.flow import FlowReplicator, FlowState
from mirrorline.replicator.worker import WorkerAgent
from mirrorline.runtime import stop_within
from mirrorline.servicehost import ServiceHost
from mirrorline.telemetry.replication import ReplicationMetrics
from mirrorline.v1 import flows_pb2, replicator_pb2, replicator_pb2_grpc

log = logging.getLogger(__name__)

_FLOW_STATES = {
    FlowState.STARTING: flows_pb2.FLOW_STATE_STARTING,
    FlowState.RUNNING: flows_pb2.FLOW_STATE_RUNNING,
    FlowState.PAUSED: flows_pb2.FLOW_STATE_PAUSED,
    FlowState.ERROR: flows_pb2.FLOW_STATE_ERROR,
    FlowState.STOPPED: flows_pb2.FLOW_STATE_ERROR,
}


class ReplicatorService(ServiceHost):
    """Flows of the file (standalone) or of the control log (worker), on the host."""

    kind = "replicator"

    def __init__(self, settings: MirrorSettings, *, worker_id: str = "replicator",
                 targets: Sequence[str] | None = None, grpc_host: str = "127.0.0.1",
                 grpc_port: int = 0, metrics_host: str = "127.0.0.1",
                 metrics_port: int | None = 0, worker: bool = False,
                 advertise: str | None = None) -> None:
        super().__init__(settings, instance_id=worker_id, targets=targets,
                         grpc_host=grpc_host, grpc_port=grpc_port, metrics_host=metrics_host,
                         metrics_port=metrics_port, advertise=advertise, joins=worker)
        self.worker_id = worker_id
        self._worker = worker
        self._standalone: list[FlowReplicator] = []
        self.agent: WorkerAgent | None = None
        self.probes: dict[str, ClusterProbe] = {}
        self._replication: ReplicationMetrics | None = None

    @property
    def flows(self) -> list[FlowReplicator]:
        return self.agent.flows if self.agent is not None else self._standalone

    @property
    def control_client_id(self) -> str:
        return f"worker-{self.worker_id}"

    async def check(self) -> None:
        if not self._worker and not self.settings.enabled_flows(self._targets):
            which = f" targeting {', '.join(self._targets)}" if self._targets else ""
            raise ConfigError(None, f"no enabled replication flow{which}: set "
                                    "'<source>-><target>.enabled = true'",
                              source=self.settings.source_path)

    def register_metrics(self, meter: Meter) -> None:
        self._replication = ReplicationMetrics(meter)

    def add_servicers(self, server: ServiceServer) -> None:
        server.add(replicator_pb2_grpc.add_ReplicatorServicer_to_server,
                   _ReplicatorServicer(self),
                   [replicator_pb2.DESCRIPTOR.services_by_name["Replicator"].full_name])

    async def started(self) -> None:
        assert self.telemetry is not None and self._replication is not None
        if self._worker:
            self._probe(self.home)
        else:
            flows = self.settings.enabled_flows(self._targets)
            for wanted in flows:  # a configuration error: exit 2 before anything is copied
                with contextlib.suppress(TargetUnreachable):
                    await check_exactly_once(wanted, self.settings.raw)
            self._standalone = [FlowReplicator(f, worker_id=self.worker_id,
                                               metrics=self._replication,
                                               tracer=self.telemetry.tracer) for f in flows]
            for flow in self._standalone:
                self.spawn(flow.start(), f"start {flow.name}")
        log.info("replicator %s: gRPC %s, metrics %s, %s", self.worker_id, self.grpc_port,
                 self.telemetry.metrics_port,
                 "worker of the controller" if self._worker
                 else "flows " + ", ".join(f.name for f in self._standalone))

    async def on_joined(self) -> None:
        """Worker mode: the control log is read; do what it assigns."""
        assert self._control is not None and self.telemetry is not None
        assert self._replication is not None
        self.agent = WorkerAgent(self.settings, self._control, worker_id=self.worker_id,
                                 address=self.address, metrics=self._replication,
                                 tracer=self.telemetry.tracer)
        await self.agent.start()

    def _probe(self, alias: str) -> None:
        if alias in self.probes:
            return
        cluster = self.settings.clusters[alias]
        kwargs, _ = admin_kwargs(dict(cluster.connection))
        probe = ClusterProbe(alias, dict(kwargs, client_id=f"replicator-{self.worker_id}|probe"))
        self.probes[alias] = probe
        probe.start()

    async def stop_parts(self) -> None:
        # Each part saves what it can (progress, offset map) within its own budget; a part
        # stuck on an unreachable cluster is abandoned rather than waited for.
        if self.agent is not None:
            await stop_within(self.agent.stop(), 1.2, "stopping the worker's flows")
        await stop_within(asyncio.gather(*(f.stop() for f in self._standalone),
                                         return_exceptions=True), 1.2, "stopping the flows")

    async def stop_rest(self) -> None:
        await asyncio.gather(*(p.stop() for p in self.probes.values()), return_exceptions=True)

    def serving(self) -> bool:
        if self._worker and self.agent is None:
            return False  # the control log has not been read yet
        if self.agent is not None and (self.agent.lease.fenced
                                       or self.agent.lease.heartbeat_error
                                       or self.agent.stopped_following() is not None):
            return False
        return (all(p.reachable for p in self.probes.values())
                and all(f.healthy for f in self.flows))

    def evaluate_health(self) -> bool:
        for flow in self.flows:  # clusters come and go with the flows a worker runs
            self._probe(flow.flow.source)
            self._probe(flow.flow.target)
        return self.serving()

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
            out.partitions.extend(views)
        if self.agent is not None:
            for name, why in sorted(self.agent.broken.items()):
                out.flows.add(flow=name, state=flows_pb2.FLOW_STATE_ERROR,
                              error=f"cannot run here: {why}")
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
