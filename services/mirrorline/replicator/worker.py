"""A replicator worker under a controller: it copies what the control log assigns it.

The worker replays the control log like every service, and from then on does what the
log says for its own id: copy the partitions assigned to it, pause and resume flows,
let go of partitions revoked from it. It heartbeats to the leader several times per
lease with the control-log offset it has acted on and the partitions it runs; a revoked
partition counts as released once a heartbeat at or after the revoke no longer lists it,
and by then its progress is durable.

Following the log, heartbeats and self-fencing are the agents' base
(`mirrorline.controlplane.agent.PartitionAgent`), shared with the Spark executor.
Self-fencing (`mirrorline.controlplane.leaseholder`): when no heartbeat has succeeded for
three quarters of the lease the controller granted, the worker stops every partition by
itself. The controller waits for the full lease before handing them to another worker,
so two workers never copy the same partition at once, even across a network partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from aiokafka import TopicPartition
from opentelemetry.trace import Tracer

from mirrorline.controlplane.agent import PartitionAgent
from mirrorline.controlplane.log import ControlLog
from mirrorline.core.flowdefs import Definition
from mirrorline.core.settings import FlowSettings, MirrorSettings
from mirrorline.replicator.flow import FlowReplicator
from mirrorline.telemetry.replication import ReplicationMetrics
from mirrorline.v1 import flows_pb2

log = logging.getLogger(__name__)

#: Wait before trying again to apply a wish that failed.
RETRY_S = 1.0


@dataclass(frozen=True)
class Desired:
    """What the log wants one flow on this worker to look like."""

    version: int
    definition: Definition
    partitions: Mapping[TopicPartition, str]
    paused: bool


class FlowDriver:
    """Brings one FlowReplicator to the desired state, whenever it is connected."""

    def __init__(self, flow: FlowReplicator, desired: Desired,
                 on_settled: Callable[[], None]) -> None:
        self.flow = flow
        self._on_settled = on_settled
        self.desired = desired
        self.applied: Desired | None = None
        self._changed = asyncio.Event()
        self._changed.set()
        self._task: asyncio.Task[None] | None = None
        self._start: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._start = asyncio.create_task(self.flow.start(), name=f"start {self.flow.name}")
        self._task = asyncio.create_task(self._run(), name=f"drive {self.flow.name}")

    def want(self, desired: Desired) -> None:
        self.desired = desired
        self._changed.set()

    @property
    def settled(self) -> bool:
        """Nothing left to do for the current wish. A flow that has not connected yet runs
        nothing, so it holds up no release (it takes its partitions once connected)."""
        return self.applied is self.desired or not self.flow.ready.is_set()

    async def _run(self) -> None:
        await self.flow.ready.wait()
        self._on_settled()
        while True:
            await self._changed.wait()
            self._changed.clear()
            desired = self.desired
            try:
                await self.flow.set_partitions(desired.partitions)
            except Exception as exc:
                # Reading where to start can fail (the target briefly unreachable, a read
                # timing out): say so and try again, rather than leave this driver dead
                # and the partitions granted to this worker copied by nobody.
                log.warning("%s: taking on %d partitions failed (%r); retrying in %.0fs",
                            self.flow.name, len(desired.partitions), exc, RETRY_S)
                await asyncio.sleep(RETRY_S)
                self._changed.set()
                continue
            if desired.paused and not self.flow.paused:
                self.flow.pause()
            elif not desired.paused and self.flow.paused:
                self.flow.resume()
            self.applied = desired
            self._on_settled()

    async def stop(self) -> None:
        for task in (self._task, self._start):
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in (self._task, self._start) if t is not None),
                             return_exceptions=True)
        with contextlib.suppress(Exception):
            if self.flow.ready.is_set():
                await self.flow.set_partitions({})
        await self.flow.stop()


class WorkerAgent(PartitionAgent):
    label = "worker"
    retry_s = RETRY_S

    def __init__(self, deployment: MirrorSettings, control: ControlLog, *, worker_id: str,
                 address: str, metrics: ReplicationMetrics, tracer: Tracer) -> None:
        super().__init__(deployment, control, worker_id=worker_id, address=address)
        self._metrics = metrics
        self._tracer = tracer
        self.drivers: dict[str, FlowDriver] = {}
        #: Per flow, the source topics its partitions were let go for because they were
        #: deleted: kept here, since a flow that owns nothing is stopped and started anew.
        self._vanished: dict[str, set[str]] = {}
        self._settled = asyncio.Event()
        self._closing: set[asyncio.Future[None]] = set()

    @property
    def flows(self) -> list[FlowReplicator]:
        return [d.flow for d in self.drivers.values()]

    async def stop_more(self) -> None:
        await asyncio.gather(*(d.stop() for d in self.drivers.values()), return_exceptions=True)
        await asyncio.gather(*self._closing, return_exceptions=True)

    # -- following the log --------------------------------------------------------------
    async def act(self, offset: int) -> None:
        self._reconcile()
        while not all(d.settled for d in self.drivers.values()):
            self._settled.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._settled.wait(), 0.5)
        self.acted_offset = offset
        await self._drop_finished()

    def _reconcile(self) -> None:
        state = self.control.state
        mine = self.mine(TopicPartition)
        broken: dict[str, str] = {}
        for name in set(self.drivers) | set(mine):
            record = state.flows.get(name)
            driver = self.drivers.get(name)
            partitions = mine.get(name, {})
            if record is None:
                if driver is not None:
                    driver.want(Desired(driver.desired.version, driver.desired.definition,
                                        {}, False))
                continue
            definition = Definition(record.source, record.target, record.properties)
            desired = Desired(record.version, definition, partitions, record.paused)
            if driver is not None and driver.desired.definition != definition:
                # The definition changed: let this flow's partitions go, then start anew.
                driver.want(Desired(desired.version, driver.desired.definition, {}, False))
                continue
            if driver is None:
                if not partitions:
                    continue
                driver = self.build(name, definition, broken,
                                    self._driver_for(name, desired))
                if driver is None:
                    continue
                self.drivers[name] = driver
                driver.start()
            elif desired != driver.desired:
                driver.want(desired)
        self.settle_broken(broken)

    def _driver_for(self, name: str, desired: Desired
                    ) -> Callable[[FlowSettings], FlowDriver]:
        def make(settings: FlowSettings) -> FlowDriver:
            return FlowDriver(FlowReplicator(settings, worker_id=self.worker_id,
                                             metrics=self._metrics, tracer=self._tracer,
                                             discover=False,
                                             vanished=self._vanished.setdefault(name, set())),
                              desired, self._settled.set)
        return make

    async def _drop_finished(self) -> None:
        """Stop flows that own nothing any more (deleted, redefined, moved away); a
        redefined flow starts again with its new definition on the next round."""
        for name, driver in list(self.drivers.items()):
            if not driver.desired.partitions and driver.settled:
                del self.drivers[name]
                await driver.stop()
                self._changed.set()

    # -- heartbeats and fencing ---------------------------------------------------------
    def owned(self) -> list[flows_pb2.PartitionStatus]:
        return [p for d in self.drivers.values() for p in d.flow.partitions()]

    def on_fence(self) -> None:
        self._changed.set()
        # The controller hands these partitions to another worker when the lease runs
        # out: nothing sent before must be able to land after that.
        for driver in self.drivers.values():
            aborting = asyncio.ensure_future(driver.flow.abort_sends("fenced"))
            self._closing.add(aborting)
            aborting.add_done_callback(self._closing.discard)
