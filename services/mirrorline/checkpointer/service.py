"""The checkpointer process: one FlowCheckpointer per flow, its gRPC API, its announcements.

Flows come from the control log when a controller runs the deployment (`--managed`, as
`mirrorline run` starts it), else from the properties file; start-up, following the
control log, announcing and stopping are `mirrorline.flowservice.FlowService`'s. Each
flow starts as soon as its target answers -- checkpoints and the offset map live there --
and works on with whatever the source allows: when the source is down, group offsets
cannot be read, but translation (from the offset map) and failover (from the last
checkpoints) still can.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from mirrorline.checkpointer.api import CheckpointerServicer
from mirrorline.checkpointer.flow import FlowCheckpointer
from mirrorline.core.backoff import Backoff
from mirrorline.core.settings import FlowSettings
from mirrorline.flowservice import FlowService
from mirrorline.grpcserver import ServiceServer
from mirrorline.kafka.admin import ClusterAdmin
from mirrorline.kafka.causes import explain, unreachable
from mirrorline.kafka.clients import admin_kwargs, build, consumer_kwargs, producer_kwargs
from mirrorline.kafka.health import ClusterProbe
from mirrorline.runtime import stop_within
from mirrorline.v1 import failover_pb2, failover_pb2_grpc

log = logging.getLogger(__name__)


class FlowRunner:
    """Starts one flow's checkpointer once its target answers; retries until then."""

    def __init__(self, flow: FlowSettings, instance: str) -> None:
        self.flow = flow
        self._name = f"{flow.name}|checkpointer-{instance}"
        self.checkpointer: FlowCheckpointer | None = None
        #: The checkpointer being started (its producer may be open already): a stop
        #: then stops it too, so no client is left unclosed.
        self._starting: FlowCheckpointer | None = None
        self.source_up = False
        #: What was last said about the source being unreachable (said once per reason).
        self._source_said: str | None = None
        self.error: str | None = None
        self._admins: list[ClusterAdmin] = []
        self._task: asyncio.Task[None] | None = None

    @property
    def started(self) -> bool:
        return self.checkpointer is not None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"checkpointer {self.flow.name}")

    async def _admin(self, alias: str, cfg: Mapping[str, str], role: str,
                     timeout: float | None = None) -> ClusterAdmin:
        admin = await ClusterAdmin.open(alias, build(admin_kwargs, cfg, f"{self._name}|{role}"),
                                        timeout)
        self._admins.append(admin)
        return admin

    async def _run(self) -> None:
        flow, backoff, attempt = self.flow, Backoff(maximum=10.0), 0
        while True:  # checkpoints and the offset map live on the target: it is needed
            try:
                target = await self._admin(flow.target, flow.clients.target_admin,
                                           "target-admin")
                break
            except Exception as exc:
                delay = backoff.delay(attempt)
                attempt += 1
                self.error = unreachable(flow.target, exc,
                                         flow.clients.target_admin.get("bootstrap.servers"),
                                         role="target")
                log.warning("%s: %s; retrying in %.0fs", flow.name, self.error, delay)
                await asyncio.sleep(delay)
        source = await self._source()
        checkpointer = FlowCheckpointer(
            flow, source_admin=source, target_admin=target,
            producer_kwargs=build(producer_kwargs, flow.clients.target_producer,
                                  f"{self._name}|producer"),
            source_consumer=build(consumer_kwargs, flow.clients.source_consumer,
                                  f"{self._name}|syncs-reader"),
            target_consumer=build(consumer_kwargs, flow.clients.target_consumer,
                                  f"{self._name}|reader"))
        self._starting = checkpointer
        while True:
            try:
                await checkpointer.start()
                break
            except Exception as exc:
                self.error = f"cannot start checkpointing: {explain(exc)}"
                log.warning("%s: %s", flow.name, self.error)
                await asyncio.sleep(backoff.delay(attempt))
                attempt += 1
        self.checkpointer, self._starting, self.error = checkpointer, None, None
        checkpointer.source_down = None if self.source_up else self._source_said
        while not self.source_up:  # keep trying the source in the background
            await asyncio.sleep(5.0)
            checkpointer.set_source_admin(await self._source())
            checkpointer.source_down = None if self.source_up else self._source_said

    async def _source(self) -> ClusterAdmin:
        """The source admin; when the source does not answer, an unstarted one (its calls
        fail until a later attempt succeeds) so that work on the target goes on."""
        try:
            admin = await self._admin(self.flow.source, self.flow.clients.source_admin,
                                      "source-admin", timeout=10)
            self.source_up = True
            if self._source_said is not None:
                log.info("%s: source cluster %r reachable again", self.flow.name,
                         self.flow.source)
            return admin
        except Exception as exc:
            servers = self.flow.clients.source_admin.get("bootstrap.servers")
            line = unreachable(self.flow.source, exc, servers, role="source")
            if line != self._source_said:  # retried every 5 s: said once per reason
                log.warning("%s: %s; working from the target alone", self.flow.name, line)
                self._source_said = line
            return ClusterAdmin(self.flow.source, build(
                admin_kwargs, self.flow.clients.source_admin, f"{self._name}|source-admin"))

    @property
    def healthy(self) -> bool:
        """Started, and its last checkpointing round worked."""
        return self.checkpointer is not None and self.checkpointer.error is None

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        current = self.checkpointer or self._starting
        if current is not None:
            await stop_within(current.stop(), 1.0, f"stopping {self.flow.name}")
        for admin in self._admins:
            await stop_within(admin.close(), 0.3, "closing an admin client")


class CheckpointerService(FlowService[FlowRunner]):
    kind = "checkpointer"
    nothing_to_do = "no enabled replication flow to checkpoint"
    verb = "checkpointed"
    @functools.cached_property
    def probes(self) -> dict[str, ClusterProbe]:
        """One probe per flow target: checkpoints cannot be written while it is down."""
        return {}

    def new_runner(self, flow: FlowSettings) -> FlowRunner:
        return FlowRunner(flow, self.instance_id)

    def add_servicers(self, server: ServiceServer) -> None:
        server.add(failover_pb2_grpc.add_CheckpointerServicer_to_server,
                   CheckpointerServicer(self),
                   [failover_pb2.DESCRIPTOR.services_by_name["Checkpointer"].full_name])

    def serving(self) -> bool:
        """SERVING only while every flow checkpoints (a failing round is NOT_SERVING) and,
        when managed, the control log is read."""
        if not self.joined:
            return False
        return (all(r.healthy for r in self.runners.values())
                and all(p.reachable for p in self.probes.values()))

    def check_health(self) -> None:
        for runner in list(self.runners.values()):
            target = runner.flow.target
            if target not in self.probes:
                self.probes[target] = probe = ClusterProbe(target, build(
                    admin_kwargs, runner.flow.clients.target_admin,
                    f"checkpointer-{self.instance_id}|probe"))
                probe.start()

    async def stop_more(self) -> None:
        await stop_within(asyncio.gather(*(p.stop() for p in self.probes.values()),
                                         return_exceptions=True), 0.3, "closing the probes")

    def register_metrics(self, meter: Meter) -> None:
        def read(pick: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
            def callback(_options: CallbackOptions) -> list[Observation]:
                now = time.time()
                out = []
                for runner in self.runners.values():
                    if runner.checkpointer is None:
                        continue
                    stat = runner.checkpointer.latency
                    value = {"last": stat.last, "min": stat.minimum(now),
                             "max": stat.maximum(now), "avg": stat.average(now)}[pick]
                    if value is not None:
                        out.append(Observation(value, {"source": runner.flow.source,
                                                       "target": runner.flow.target}))
                return out
            return callback

        for suffix, pick in (("", "last"), ("-min", "min"), ("-max", "max"), ("-avg", "avg")):
            meter.create_observable_gauge(f"checkpoint-latency-ms{suffix}",
                                          callbacks=[read(pick)])

        # The latency exists only once a checkpoint was written: without these, a
        # checkpointer with no consumer group yet (or still connecting) served an empty
        # /metrics body -- indistinguishable from a broken one.
        def flows(_options: CallbackOptions) -> list[Observation]:
            return [Observation(len(self.runners))]

        def per_flow(pick: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
            def callback(_options: CallbackOptions) -> list[Observation]:
                out = []
                for runner in self.runners.values():
                    attrs = {"source": runner.flow.source, "target": runner.flow.target}
                    if pick == "started":
                        out.append(Observation(int(runner.started), attrs))
                    elif runner.checkpointer is None:
                        continue
                    elif pick == "groups":
                        out.append(Observation(len(runner.checkpointer.last_checkpoint_ms),
                                               attrs))
                    elif pick == "failed":
                        out.append(Observation(runner.checkpointer.failed_rounds, attrs))
                    elif pick == "unmapped":
                        out.append(Observation(sum(runner.checkpointer.unmapped.values()),
                                               attrs))
                    elif pick == "age" and runner.checkpointer.current_ms is not None:
                        # How stale the checkpoints a consumer failing over now would
                        # start from may be: grows while rounds fail.
                        out.append(Observation(
                            time.time() * 1000 - runner.checkpointer.current_ms, attrs))
                return out
            return callback

        meter.create_observable_gauge("checkpointer-flows", callbacks=[flows],
                                      description="flows this checkpointer runs")
        meter.create_observable_gauge("checkpointer-flow-started", callbacks=[per_flow("started")],
                                      description="1 once the flow's checkpointing started "
                                                  "(its target answered), else 0")
        meter.create_observable_gauge("checkpoint-groups", callbacks=[per_flow("groups")],
                                      description="consumer groups checkpointed so far")
        meter.create_observable_gauge("checkpoint-age-ms", callbacks=[per_flow("age")],
                                      description="ms since the flow's checkpoints were last "
                                                  "brought up to date (a round succeeded)")
        meter.create_observable_gauge("checkpoint-unmapped-partitions",
                                      callbacks=[per_flow("unmapped")],
                                      description="committed partitions the last round could "
                                                  "not translate (no offset sync covers them)")
        meter.create_observable_counter("checkpoint-failed-rounds",
                                        callbacks=[per_flow("failed")],
                                        description="checkpoint rounds that failed or waited "
                                                    "for an unreachable source")
