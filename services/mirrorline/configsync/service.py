"""The config-sync process: one FlowRunner per flow, its gRPC API, its metrics.

Everything that follows a remote topic's life after the replicator created it happens
here, in one place: topic configs, partition growth, ACLs, and drift plans of all three.
Flows come from the control log when a controller runs the deployment (`--managed`, as
`mirrorline run` starts it), else from the properties file. In managed mode the service
announces itself to the leading controller, whose Admin API forwards the drift commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Sequence

from opentelemetry.metrics import CallbackOptions, Observation

from mirrorline.configsync.api import ConfigSyncServicer
from mirrorline.configsync.runner import FlowRunner
from mirrorline.controlplane.announce import announce_forever
from mirrorline.controlplane.join import open_control_log
from mirrorline.controlplane.log import ControlLog
from mirrorline.core.errors import ConfigError
from mirrorline.core.flowdefs import Definition, flow_settings
from mirrorline.core.settings import FlowSettings, MirrorSettings
from mirrorline.grpcserver import ServiceServer
from mirrorline.telemetry import Telemetry, setup_telemetry
from mirrorline.v1 import drift_pb2, drift_pb2_grpc

log = logging.getLogger(__name__)


class ConfigSyncService:
    def __init__(self, settings: MirrorSettings, *, instance_id: str = "configsync",
                 targets: Sequence[str] | None = None, grpc_host: str = "127.0.0.1",
                 grpc_port: int = 0, metrics_host: str = "127.0.0.1",
                 metrics_port: int | None = 0, managed: bool = False,
                 advertise: str | None = None) -> None:
        self.settings = settings
        self.instance_id = instance_id
        self._targets = tuple(targets) if targets else None
        self._grpc = ServiceServer(name=f"configsync {instance_id}", host=grpc_host,
                                   port=grpc_port)
        self._metrics = (metrics_host, metrics_port)
        self._managed = managed
        self._advertise = advertise
        self.runners: dict[str, FlowRunner] = {}
        self._definitions: dict[str, Definition | None] = {}
        self._control: ControlLog | None = None
        self.telemetry: Telemetry | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._changed = asyncio.Event()

    def runner(self, flow: str) -> FlowRunner | None:
        return self.runners.get(flow)

    async def start(self) -> None:
        if not self._managed and not self.settings.enabled_flows(self._targets):
            raise ConfigError(None, "no enabled replication flow to keep in step",
                              source=self.settings.source_path)
        self.telemetry = setup_telemetry("configsync", instance=self.instance_id,
                                         metrics_port=self._metrics[1],
                                         metrics_host=self._metrics[0])
        await self.telemetry.start()
        self._register_metrics()
        self._grpc.add(drift_pb2_grpc.add_ConfigSyncServicer_to_server,
                       ConfigSyncServicer(self),
                       [drift_pb2.DESCRIPTOR.services_by_name["ConfigSync"].full_name])
        port = await self._grpc.start()
        address = self._advertise or f"127.0.0.1:{port}"
        if self._managed:
            self._tasks.append(asyncio.create_task(self._join(address),
                                                   name="join the control plane"))
        else:
            for flow in self.settings.enabled_flows(self._targets):
                self._add(flow.name, None, flow)
        self._tasks.append(asyncio.create_task(self._health(), name="health"))
        log.info("configsync %s: gRPC %s (%s)", self.instance_id, address,
                 "flows from the control log" if self._managed else "flows from the file")

    async def _join(self, address: str) -> None:
        """Managed mode: read the control log (retrying while the home cluster does not
        answer, one line per attempt), then follow it and announce this service."""
        self._control = await open_control_log(self.settings, self._targets,
                                               f"configsync-{self.instance_id}")
        self._control.listen(lambda *_: self._changed.set())
        self._tasks.append(asyncio.create_task(self._follow(), name="follow control log"))
        self._tasks.append(asyncio.create_task(self._announce(address), name="announce"))

    async def stop(self) -> None:
        await self._grpc.set_serving(False)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(r.stop() for r in self.runners.values()),
                             return_exceptions=True)
        if self._control is not None:
            await self._control.stop()
        await self._grpc.stop()
        if self.telemetry is not None:
            await self.telemetry.stop()

    def _add(self, name: str, definition: Definition | None, flow: FlowSettings) -> None:
        runner = FlowRunner(flow, self.instance_id)
        self.runners[name] = runner
        self._definitions[name] = definition
        runner.start()

    async def _follow(self) -> None:
        assert self._control is not None
        while True:
            self._changed.clear()
            state = self._control.state
            wanted = {n: Definition(r.source, r.target, r.properties)
                      for n, r in state.flows.items()
                      if not self._targets or r.target in self._targets}
            for name in list(self.runners):
                if wanted.get(name) != self._definitions.get(name):
                    runner = self.runners.pop(name)
                    self._definitions.pop(name, None)
                    await runner.stop()
            for name, definition in wanted.items():
                if name in self.runners:
                    continue
                try:
                    self._add(name, definition, flow_settings(self.settings, definition))
                except ConfigError as exc:
                    log.error("flow %s cannot be synced here: %s", name, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), 5.0)

    async def _announce(self, address: str) -> None:
        """Tell the leading controller where to forward drift requests."""
        assert self._control is not None
        await announce_forever(self._control, "configsync", self.instance_id, address)
    async def _health(self) -> None:
        while True:
            joined = not self._managed or self._control is not None
            await self._grpc.set_serving(joined and all(r.started
                                                        for r in self.runners.values()))
            await asyncio.sleep(1.0)

    def _register_metrics(self) -> None:
        assert self.telemetry is not None

        def observe(pick: str) -> Iterable[Observation]:
            out = []
            for runner in self.runners.values():
                plan = runner.plan
                attrs = {"source": runner.flow.source, "target": runner.flow.target,
                         "mode": runner.flow.sync_mode}
                if pick == "pending" and plan is not None:
                    out.append(Observation(plan.changes, attrs))
                elif pick == "differences" and plan is not None:
                    out.append(Observation(plan.differences, attrs))
                elif pick == "unavailable" and plan is not None:
                    out.append(Observation(len(plan.unavailable), attrs))
                elif pick == "rounds":
                    out.append(Observation(runner.rounds, attrs))
            return out

        def callback(pick: str):  # type: ignore[no-untyped-def]
            def read(_options: CallbackOptions) -> Iterable[Observation]:
                return observe(pick)
            return read

        meter = self.telemetry.meter
        meter.create_observable_gauge(
            "configsync-drift-changes", callbacks=[callback("pending")],
            description="changes the current drift plan would make (pending with "
                        "sync.mode = plan)")
        meter.create_observable_gauge(
            "configsync-drift-differences", callbacks=[callback("differences")],
            description="differences between source and target, including those the "
                        "sync leaves alone")
        meter.create_observable_gauge(
            "configsync-unavailable-features", callbacks=[callback("unavailable")],
            description="features (configs, partitions, acls) unavailable or disabled")
        meter.create_observable_counter(
            "configsync-rounds", callbacks=[callback("rounds")],
            description="sync rounds completed")
