"""The executor as a worker of kind `spark` under the controller.

Like a replicator worker it replays the control log, runs what the log assigns to its
id, heartbeats about once a second with the control-log offset it has acted on and the
partitions it runs, and fences itself (stops every query) when it could not heartbeat
for three quarters of its lease -- the controller waits for the whole lease before
handing the partitions to someone else. It acts on an offset only once every hand-over
it implies is done (queries drained, progress durable), so a release it reports is one
the next owner can resume from exactly.

When a flow's query fails, the executor stops it, keeps its progress, and says why in
its heartbeats (`problem`): the controller then gives those partitions back to the
replicator workers and offloads nothing to this executor until the problem clears
(`PROBLEM_HOLD_S` after the partitions were taken back).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import grpc

from mirrorline import grpcsecure
from mirrorline.controlplane.log import ControlLog
from mirrorline.core.errors import ConfigError
from mirrorline.core.flowdefs import Definition, flow_settings
from mirrorline.core.settings import MirrorSettings
from mirrorline.telemetry.replication import ReplicationMetrics
from mirrorline.v1 import coordinator_pb2, coordinator_pb2_grpc, flows_pb2
from mirrorline_spark.executor.driver import SparkDriver
from mirrorline_spark.executor.flowrun import FlowRun

log = logging.getLogger(__name__)

HEARTBEAT_S = 1.0
FENCE_AT = 0.75
PROBLEM_HOLD_S = 30.0
KIND = "spark"


class SparkAgent:
    def __init__(self, deployment: MirrorSettings, control: ControlLog, *, worker_id: str,
                 address: str, driver: SparkDriver, metrics: ReplicationMetrics,
                 workdir: str) -> None:
        self.deployment = deployment
        self.control = control
        self.worker_id = worker_id
        self.address = address
        self._driver = driver
        self._metrics = metrics
        self._workdir = workdir
        self.runs: dict[str, FlowRun] = {}
        self.broken: dict[str, str] = {}
        self.fenced = False
        self.acted_offset = -1
        self.lease_s = 6.0
        self.heartbeat_error: str | None = None
        self._problem_cleared_at: dict[str, float] = {}
        self._last_ok: float | None = None
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._channel: grpc.aio.Channel | None = None
        self._channel_address: str | None = None
        self._closing: set[asyncio.Future[None]] = set()
        self._started_ms = int(time.time() * 1000)

    @property
    def problem(self) -> str:
        return "; ".join(r.problem for r in self.runs.values() if r.problem)

    async def start(self) -> None:
        self.control.listen(lambda *_: self._changed.set())
        self._tasks.append(asyncio.create_task(self._follow(), name="follow control log"))
        self._tasks.append(asyncio.create_task(self._heartbeats(), name="heartbeats"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(r.close() for r in self.runs.values()), return_exceptions=True)
        self.runs.clear()
        if self._channel is not None:
            await self._channel.close()

    # -- following the log --------------------------------------------------------------
    async def _follow(self) -> None:
        while True:
            offset = self.control.state.applied_offset
            try:
                await self._apply()
                self.acted_offset = offset
            except Exception as exc:  # a cluster or Spark hiccup: say why, try again
                log.warning("executor %s: cannot apply the control log yet: %r",
                            self.worker_id, exc)
                await asyncio.sleep(2.0)
                continue
            if self.control.state.applied_offset == offset:
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), 1.0)

    async def _apply(self) -> None:
        state = self.control.state
        mine: dict[str, dict[tuple[str, int], str]] = {}
        if not self.fenced:
            for key, remote in state.owned_by(self.worker_id).items():
                mine.setdefault(key.flow, {})[(key.topic, key.partition)] = remote
        self.broken.clear()
        now = time.monotonic()
        for name in sorted(set(self.runs) | set(mine)):
            record = state.flows.get(name)
            run = self.runs.get(name)
            wanted = mine.get(name, {}) if record is not None and not record.paused else {}
            if run is not None and run.problem and not mine.get(name):
                # The controller took the partitions back: hold a while, then be available.
                since = self._problem_cleared_at.setdefault(name, now)
                if now - since >= PROBLEM_HOLD_S:
                    log.info("%s: problem cleared; available for offloading again", name)
                    run.problem = None
                    self._problem_cleared_at.pop(name, None)
            if run is None:
                if not wanted or record is None:
                    continue
                try:
                    settings = flow_settings(self.deployment, Definition(
                        record.source, record.target, record.properties))
                except ConfigError as exc:
                    self.broken[name] = str(exc)
                    continue
                run = FlowRun(settings, driver=self._driver, metrics=self._metrics,
                              worker_id=self.worker_id, workdir=self._workdir)
                await run.open()
                self.runs[name] = run
            await run.apply(wanted)
            if not wanted and not run.problem and not run.failed:
                del self.runs[name]
                await run.close()

    # -- heartbeats and fencing ---------------------------------------------------------
    def owned(self) -> list[flows_pb2.PartitionStatus]:
        return [p for r in self.runs.values() for p in r.partitions()]

    async def _heartbeats(self) -> None:
        while True:
            await self._heartbeat_once()
            await asyncio.sleep(HEARTBEAT_S)

    async def _heartbeat_once(self) -> None:
        address = self.control.state.leader_address
        now = time.monotonic()
        if not address:
            self.heartbeat_error = "no controller leads yet"
            return
        try:
            stub = coordinator_pb2_grpc.CoordinatorStub(self._channel_to(address))
            reply = await stub.Heartbeat(coordinator_pb2.WorkerHeartbeat(
                worker_id=self.worker_id, address=self.address,
                applied_offset=self.acted_offset, partitions=self.owned(),
                started_at_ms=self._started_ms, kind=KIND,
                ui_address=self._driver.ui_address, problem=self.problem),
                timeout=max(1.0, self.lease_s / 4))
        except grpc.aio.AioRpcError as exc:
            self.heartbeat_error = (f"heartbeat to {address} failed: {exc.code().name} "
                                    f"{exc.details()}")
            if (not self.fenced and self._last_ok is not None
                    and now - self._last_ok > FENCE_AT * self.lease_s):
                log.error("executor %s: no heartbeat for %.1fs (lease %.1fs); stopping every "
                          "query until the controller answers", self.worker_id,
                          now - self._last_ok, self.lease_s)
                self.fenced = True
                self._changed.set()
            return
        self.lease_s = reply.lease_ms / 1000.0
        self._last_ok = now
        self.heartbeat_error = None
        if self.fenced:
            log.warning("executor %s: heartbeats succeed again", self.worker_id)
            self.fenced = False
            self._changed.set()

    def _channel_to(self, address: str) -> grpc.aio.Channel:
        if self._channel is None or self._channel_address != address:
            old = self._channel
            if old is not None:
                closing = asyncio.ensure_future(old.close())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)
            self._channel = grpcsecure.channel(address)
            self._channel_address = address
        return self._channel
