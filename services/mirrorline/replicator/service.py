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

from mirrorline.controlplane.home import control_topics, home_clients, home_cluster
from mirrorline.controlplane.log import ControlLog
from mirrorline.core.backoff import Backoff
from mirrorline.core.errors import ConfigError
from mirrorline.core.settings import MirrorSettings
from mirrorline.grpcserver import ServiceServer
from mirrorline.kafka.causes import unreachable
from mirrorline.kafka.clients import admin_kwargs
from mirrorline.kafka.health import ClusterProbe
from mirrorline.replicator.exactly_once import TargetUnreachable, check_exactly_once
from mirrorline.replicator.flow import FlowReplicator, FlowState
from mirrorline.replicator.worker import WorkerAgent
from mirrorline.runtime import stop_within
from mirrorline.telemetry import Telemetry, setup_telemetry
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


class ReplicatorService:
    def __init__(self, settings: MirrorSettings, *, worker_id: str = "replicator",
                 targets: Sequence[str] | None = None, grpc_host: str = "127.0.0.1",
                 grpc_port: int = 0, metrics_host: str = "127.0.0.1",
                 metrics_port: int | None = 0, worker: bool = False,
                 advertise: str | None = None) -> None:
        self.settings = settings
        self.worker_id = worker_id
        self._targets = tuple(targets) if targets else None
        self._grpc = ServiceServer(name=f"replicator {worker_id}", host=grpc_host,
                                   port=grpc_port)
        self._metrics_host, self._metrics_port = metrics_host, metrics_port
        self._worker = worker
        self._advertise = advertise
        self.telemetry: Telemetry | None = None
        self._standalone: list[FlowReplicator] = []
        self.agent: WorkerAgent | None = None
        self._control: ControlLog | None = None
        self.probes: dict[str, ClusterProbe] = {}
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def grpc_port(self) -> int | None:
        return self._grpc.port

    @property
    def flows(self) -> list[FlowReplicator]:
        return self.agent.flows if self.agent is not None else self._standalone

    async def start(self) -> None:
        flows = self.settings.enabled_flows(self._targets)
        if not flows and not self._worker:
            which = f" targeting {', '.join(self._targets)}" if self._targets else ""
            raise ConfigError(None, f"no enabled replication flow{which}: set "
                                    "'<source>-><target>.enabled = true'",
                              source=self.settings.source_path)
        self.telemetry = setup_telemetry("replicator", instance=self.worker_id,
                                         metrics_port=self._metrics_port,
                                         metrics_host=self._metrics_host)
        await self.telemetry.start()
        metrics = ReplicationMetrics(self.telemetry.meter)
        self._grpc.add(replicator_pb2_grpc.add_ReplicatorServicer_to_server,
                       _ReplicatorServicer(self),
                       [replicator_pb2.DESCRIPTOR.services_by_name["Replicator"].full_name])
        port = await self._grpc.start()
        if self._worker:
            self._tasks.append(asyncio.create_task(
                self._join(self._advertise or f"127.0.0.1:{port}", metrics),
                name="join the control plane"))
        else:
            for wanted in flows:  # a configuration error: exit 2 before anything is copied
                with contextlib.suppress(TargetUnreachable):
                    await check_exactly_once(wanted, self.settings.raw)
            self._standalone = [FlowReplicator(f, worker_id=self.worker_id, metrics=metrics,
                                               tracer=self.telemetry.tracer) for f in flows]
            for flow in self._standalone:
                self._tasks.append(asyncio.create_task(flow.start(), name=f"start {flow.name}"))
        self._tasks.append(asyncio.create_task(self._health_loop(), name="health"))
        log.info("replicator %s: gRPC %s, metrics %s, %s", self.worker_id, port,
                 self.telemetry.metrics_port,
                 "worker of the controller" if self._worker
                 else "flows " + ", ".join(f.name for f in self._standalone))

    async def _join(self, address: str, metrics: ReplicationMetrics) -> None:
        """Worker mode: read the control log (retrying while the home cluster does not
        answer, one line per attempt), then do what it assigns."""
        home = home_cluster(self.settings, self._targets)
        self._probe(home)
        consumer, _, _ = home_clients(self.settings, home, f"worker-{self.worker_id}")
        servers = dict(self.settings.clusters[home].connection).get("bootstrap.servers")
        backoff, attempt = Backoff(initial=1.0, maximum=30.0), 0
        while True:
            control = ControlLog(consumer_kwargs=consumer,
                                 topic=control_topics(self.settings)[0])
            try:
                await control.start()
                break
            except asyncio.CancelledError:  # stopped while connecting: close what it opened
                await stop_within(control.stop(), 0.3, "closing the control log reader")
                raise
            except Exception as exc:
                await stop_within(control.stop(), 1.0, "closing the control log reader")
                delay = backoff.delay(attempt)
                attempt += 1
                log.warning("%s; retrying in %.0fs",
                            unreachable(home, exc, servers, role="home"), delay)
                await asyncio.sleep(delay)
        self._control = control
        assert self.telemetry is not None
        self.agent = WorkerAgent(self.settings, control, worker_id=self.worker_id,
                                 address=address, metrics=metrics, tracer=self.telemetry.tracer)
        await self.agent.start()

    def _probe(self, alias: str) -> None:
        if alias in self.probes:
            return
        cluster = self.settings.clusters[alias]
        kwargs, _ = admin_kwargs(dict(cluster.connection))
        probe = ClusterProbe(alias, dict(kwargs, client_id=f"replicator-{self.worker_id}|probe"))
        self.probes[alias] = probe
        probe.start()

    async def stop(self) -> None:
        await self._grpc.set_serving(False)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # Each part saves what it can (progress, offset map) within its own budget; a part
        # stuck on an unreachable cluster is abandoned rather than waited for.
        if self.agent is not None:
            await stop_within(self.agent.stop(), 1.2, "stopping the worker's flows")
        await stop_within(asyncio.gather(*(f.stop() for f in self._standalone),
                                         return_exceptions=True), 1.2, "stopping the flows")
        if self._control is not None:
            await stop_within(self._control.stop(), 0.3, "closing the control log reader")
        await asyncio.gather(*(p.stop() for p in self.probes.values()), return_exceptions=True)
        await self._grpc.stop(grace=0.3)
        if self.telemetry is not None:
            await self.telemetry.stop()

    def serving(self) -> bool:
        if self._worker and self.agent is None:
            return False  # the control log has not been read yet
        if self.agent is not None and (self.agent.lease.fenced
                                       or self.agent.lease.heartbeat_error
                                       or self.agent.stopped_following() is not None):
            return False
        return (all(p.reachable for p in self.probes.values())
                and all(f.healthy for f in self.flows))

    async def _health_loop(self) -> None:
        while True:
            for flow in self.flows:  # clusters come and go with the flows a worker runs
                self._probe(flow.flow.source)
                self._probe(flow.flow.target)
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
