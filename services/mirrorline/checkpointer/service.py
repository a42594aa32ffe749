"""The checkpointer process: one FlowCheckpointer per flow, its gRPC API, its announcements.

Flows come from the control log when a controller runs the deployment (`--managed`, as
`mirrorline run` starts it), else from the properties file. Each flow starts as soon as
its target answers -- checkpoints and the offset map live there -- and works on with
whatever the source allows: when the source is down, group offsets cannot be read, but
translation (from the offset map) and failover (from the last checkpoints) still can.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from opentelemetry.metrics import CallbackOptions, Observation

from mirrorline.checkpointer.api import CheckpointerServicer
from mirrorline.checkpointer.flow import FlowCheckpointer
from mirrorline.controlplane.announce import announce_forever
from mirrorline.controlplane.join import open_control_log
from mirrorline.controlplane.log import ControlLog
from mirrorline.core.backoff import Backoff
from mirrorline.core.errors import ConfigError
from mirrorline.core.flowdefs import Definition, flow_settings
from mirrorline.core.settings import FlowSettings, MirrorSettings
from mirrorline.grpcserver import ServiceServer
from mirrorline.kafka.admin import ClusterAdmin
from mirrorline.kafka.causes import explain
from mirrorline.kafka.clients import admin_kwargs, build, consumer_kwargs, producer_kwargs
from mirrorline.kafka.health import ClusterProbe
from mirrorline.runtime import stop_within
from mirrorline.telemetry import Telemetry, setup_telemetry
from mirrorline.v1 import failover_pb2, failover_pb2_grpc

log = logging.getLogger(__name__)


class FlowRunner:
    """Starts one flow's checkpointer once its target answers; retries until then."""

    def __init__(self, flow: FlowSettings, instance: str) -> None:
        self.flow = flow
        self._name = f"{flow.name}|checkpointer-{instance}"
        self.checkpointer: FlowCheckpointer | None = None
        self.source_up = False
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
        admin = ClusterAdmin(alias, build(admin_kwargs, cfg, f"{self._name}|{role}"))
        try:
            await asyncio.wait_for(admin.start(), timeout)
        except BaseException:
            with contextlib.suppress(Exception):
                await admin.close()
            raise
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
                self.error = (f"target cluster {flow.target!r} unreachable: "
                              f"{explain(exc, flow.clients.target_admin.get('bootstrap.servers'))}")
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
        while True:
            try:
                await checkpointer.start()
                break
            except Exception as exc:
                self.error = f"cannot start checkpointing: {explain(exc)}"
                log.warning("%s: %s", flow.name, self.error)
                await asyncio.sleep(backoff.delay(attempt))
                attempt += 1
        self.checkpointer, self.error = checkpointer, None
        while not self.source_up:  # keep trying the source in the background
            await asyncio.sleep(5.0)
            checkpointer.set_source_admin(await self._source())

    async def _source(self) -> ClusterAdmin:
        """The source admin; when the source does not answer, an unstarted one (its calls
        fail until a later attempt succeeds) so that work on the target goes on."""
        try:
            admin = await self._admin(self.flow.source, self.flow.clients.source_admin,
                                      "source-admin", timeout=10)
            self.source_up = True
            return admin
        except Exception as exc:
            servers = self.flow.clients.source_admin.get("bootstrap.servers")
            log.warning("%s: source cluster %r unreachable (%s); working from the target "
                        "alone", self.flow.name, self.flow.source, explain(exc, servers))
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
        if self.checkpointer is not None:
            await stop_within(self.checkpointer.stop(), 1.0, f"stopping {self.flow.name}")
        for admin in self._admins:
            await stop_within(admin.close(), 0.3, "closing an admin client")


class CheckpointerService:
    def __init__(self, settings: MirrorSettings, *, instance_id: str = "checkpointer",
                 targets: Sequence[str] | None = None, grpc_host: str = "127.0.0.1",
                 grpc_port: int = 0, metrics_host: str = "127.0.0.1",
                 metrics_port: int | None = 0, managed: bool = False,
                 advertise: str | None = None) -> None:
        self.settings = settings
        self.instance_id = instance_id
        self._targets = tuple(targets) if targets else None
        self._grpc = ServiceServer(name=f"checkpointer {instance_id}", host=grpc_host,
                                   port=grpc_port)
        self._metrics = (metrics_host, metrics_port)
        self._managed = managed
        self._advertise = advertise
        self.runners: dict[str, tuple[Definition | None, FlowRunner]] = {}
        self._control: ControlLog | None = None
        self.telemetry: Telemetry | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._changed = asyncio.Event()
        #: Why the control log cannot be read (managed mode); None when it can.
        self.error: str | None = None
        #: One probe per flow target: checkpoints cannot be written while it is down.
        self.probes: dict[str, ClusterProbe] = {}

    def runner(self, flow: str) -> FlowRunner | None:
        found = self.runners.get(flow)
        return found[1] if found else None

    async def start(self) -> None:
        if not self._managed and not self.settings.enabled_flows(self._targets):
            raise ConfigError(None, "no enabled replication flow to checkpoint",
                              source=self.settings.source_path)
        self.telemetry = setup_telemetry("checkpointer", instance=self.instance_id,
                                         metrics_port=self._metrics[1],
                                         metrics_host=self._metrics[0])
        await self.telemetry.start()
        self._register_metrics()
        self._grpc.add(failover_pb2_grpc.add_CheckpointerServicer_to_server,
                       CheckpointerServicer(self),
                       [failover_pb2.DESCRIPTOR.services_by_name["Checkpointer"].full_name])
        port = await self._grpc.start()
        address = self._advertise or f"127.0.0.1:{port}"
        if self._managed:
            self._tasks.append(asyncio.create_task(self._join(address),
                                                   name="join the control plane"))
        else:
            for flow in self.settings.enabled_flows(self._targets):
                self._add(flow.name, None, flow)
        self._tasks.append(asyncio.create_task(self._health(), name="health"))
        log.info("checkpointer %s: gRPC %s (%s)", self.instance_id, address,
                 "flows from the control log" if self._managed else "flows from the file")

    async def _join(self, address: str) -> None:
        """Managed mode: read the control log (retrying while the home cluster does not
        answer, one line per attempt), then follow it and announce this checkpointer."""
        control = await open_control_log(self.settings, self._targets,
                                         f"checkpointer-{self.instance_id}",
                                         report=self._home_error)
        self._control = control
        control.listen(lambda *_: self._changed.set())
        self._tasks.append(asyncio.create_task(self._follow(), name="follow control log"))
        self._tasks.append(asyncio.create_task(self._announce(address), name="announce"))

    def _home_error(self, reason: str | None) -> None:
        self.error = reason

    async def stop(self) -> None:
        await self._grpc.set_serving(False)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await stop_within(asyncio.gather(*(r.stop() for _, r in self.runners.values()),
                                         return_exceptions=True), 1.2, "stopping the flows")
        if self._control is not None:
            await stop_within(self._control.stop(), 0.3, "closing the control log reader")
        await stop_within(asyncio.gather(*(p.stop() for p in self.probes.values()),
                                         return_exceptions=True), 0.3, "closing the probes")
        await self._grpc.stop(grace=0.3)
        if self.telemetry is not None:
            await self.telemetry.stop()

    def _add(self, name: str, definition: Definition | None, flow: FlowSettings) -> None:
        runner = FlowRunner(flow, self.instance_id)
        self.runners[name] = (definition, runner)
        runner.start()

    async def _follow(self) -> None:
        assert self._control is not None
        while True:
            self._changed.clear()
            state = self._control.state
            wanted = {n: Definition(r.source, r.target, r.properties)
                      for n, r in state.flows.items()}
            for name, (definition, runner) in list(self.runners.items()):
                if wanted.get(name) != definition:
                    del self.runners[name]
                    await runner.stop()
            for name, definition in wanted.items():
                if name in self.runners:
                    continue
                try:
                    self._add(name, definition, flow_settings(self.settings, definition))
                except ConfigError as exc:
                    log.error("flow %s cannot be checkpointed here: %s", name, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), 5.0)

    async def _announce(self, address: str) -> None:
        """Tell the leading controller where to forward offset and failover requests."""
        assert self._control is not None
        await announce_forever(self._control, "checkpointer", self.instance_id, address)
    def serving(self) -> bool:
        """SERVING only while every flow checkpoints (a failing round is NOT_SERVING) and,
        when managed, the control log is read."""
        if self._managed and self._control is None:
            return False
        return (all(r.healthy for _, r in self.runners.values())
                and all(p.reachable for p in self.probes.values()))

    async def _health(self) -> None:
        while True:
            for _, runner in list(self.runners.values()):
                target = runner.flow.target
                if target not in self.probes:
                    self.probes[target] = probe = ClusterProbe(target, build(
                        admin_kwargs, runner.flow.clients.target_admin,
                        f"checkpointer-{self.instance_id}|probe"))
                    probe.start()
            await self._grpc.set_serving(self.serving())
            await asyncio.sleep(1.0)

    def _register_metrics(self) -> None:
        assert self.telemetry is not None

        def read(pick: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
            def callback(_options: CallbackOptions) -> list[Observation]:
                now = time.time()
                out = []
                for _definition, runner in self.runners.values():
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

        meter = self.telemetry.meter
        for suffix, pick in (("", "last"), ("-min", "min"), ("-max", "max"), ("-avg", "avg")):
            meter.create_observable_gauge(f"checkpoint-latency-ms{suffix}",
                                          callbacks=[read(pick)])
