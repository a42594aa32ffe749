"""The executor as a worker of kind `spark` under the controller.

Like a replicator worker it replays the control log, runs what the log assigns to its
id, heartbeats (once a second, or four times per lease if that is more often) with the
control-log offset it has acted on and the partitions it runs, and fences itself (stops
every query) by the clock when no heartbeat has succeeded for three quarters of its lease
-- the controller waits for the whole lease before handing the partitions to someone
else. Heartbeats and fencing are the replicator workers' own
(`mirrorline.controlplane.leaseholder`). It acts on an offset only once every hand-over
it implies is done (queries drained, progress durable), so a release it reports is one
the next owner can resume from exactly.

One streaming query copies everything the executor owns (`executor/query.py`). When it
fails, the executor stops it, keeps every flow's progress, and says why in its
heartbeats (`problem`): the controller then gives all its partitions back to the
replicator workers and offloads nothing to this executor until the problem clears
(`PROBLEM_HOLD_S` after the partitions were taken back).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from mirrorline.controlplane.leaseholder import LeaseHolder
from mirrorline.controlplane.log import ControlLog
from mirrorline.core.errors import ConfigError, one_line
from mirrorline.core.flowdefs import Definition, flow_settings
from mirrorline.core.settings import MirrorSettings
from mirrorline.telemetry.replication import ReplicationMetrics
from mirrorline.v1 import coordinator_pb2, flows_pb2
from mirrorline_spark.executor.driver import SparkDriver
from mirrorline_spark.executor.flowrun import FlowRun
from mirrorline_spark.executor.holds import Holds
from mirrorline_spark.executor.query import ExecutorQuery

log = logging.getLogger(__name__)

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
        self.runs: dict[str, FlowRun] = {}
        self._holds = Holds()
        self.query = ExecutorQuery(driver, self.runs, worker_id=worker_id, workdir=workdir,
                                   holds=self._holds)
        self.broken: dict[str, str] = {}
        self.acted_offset = -1
        #: The definition each broken flow was refused with (said once per definition).
        self._refused: dict[str, Definition] = {}
        #: Why the last round of applying the control log failed; None when it did not.
        self.follow_error: str | None = None
        self._problem_cleared_at: float | None = None
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._started_ms = int(time.time() * 1000)
        # Heartbeats and fencing by the clock, exactly as for replicator workers.
        self.lease = LeaseHolder(f"executor {worker_id}",
                                 leader_address=lambda: control.state.leader_address,
                                 beat=self._beat, on_fence=self._changed.set,
                                 on_unfence=self._changed.set)

    @property
    def fenced(self) -> bool:
        return self.lease.fenced

    @property
    def heartbeat_error(self) -> str | None:
        return self.lease.heartbeat_error

    @property
    def problem(self) -> str:
        return self.query.problem or ""

    async def start(self) -> None:
        await self.query.start()
        self.control.listen(lambda *_: self._changed.set())
        self._tasks.append(asyncio.create_task(self._follow(), name="follow control log"))
        self.lease.start()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.query.stop()
        await asyncio.gather(*(r.close() for r in self.runs.values()), return_exceptions=True)
        self.runs.clear()
        await self.lease.stop()

    # -- following the log --------------------------------------------------------------
    async def _follow(self) -> None:
        while True:
            offset = self.control.state.applied_offset
            try:
                await self._apply()
                self.acted_offset = offset
            except Exception as exc:  # a cluster or Spark hiccup: say why once, try again
                reason = one_line(exc)
                if reason != self.follow_error:
                    log.warning("executor %s: cannot apply the control log yet: %s",
                                self.worker_id, reason)
                    log.debug("applying the control log failed", exc_info=True)
                self.follow_error = reason
                await asyncio.sleep(2.0)
                continue
            self.follow_error = None
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
        broken: dict[str, str] = {}
        if self.query.problem and not any(mine.values()):
            # The controller took the partitions back: hold a while, then be available.
            now = time.monotonic()
            if self._problem_cleared_at is None:
                self._problem_cleared_at = now
            if now - self._problem_cleared_at >= PROBLEM_HOLD_S:
                log.info("executor %s: problem cleared; available for offloading again",
                         self.worker_id)
                self.query.problem = None
                self._problem_cleared_at = None
        wanted: dict[str, dict[tuple[str, int], str]] = {}
        for name, parts in sorted(mine.items()):
            record = state.flows.get(name)
            if record is None or record.paused:
                continue
            if name not in self.runs:
                if self._holds.held(name):
                    continue
                definition = Definition(record.source, record.target, record.properties)
                if self._refused.get(name) == definition and name in self.broken:
                    broken[name] = self.broken[name]  # said already; not tried again
                    continue
                try:
                    settings = flow_settings(self.deployment, definition)
                    run = FlowRun(settings, metrics=self._metrics, worker_id=self.worker_id)
                except Exception as exc:  # this flow's error; every other flow goes on
                    broken[name] = one_line(exc)
                    self._refused[name] = definition
                    log.error("executor %s: flow %s cannot run here: %s", self.worker_id,
                              name, broken[name])
                    if not isinstance(exc, ConfigError):
                        log.debug("flow %s: applying its definition failed", name,
                                  exc_info=True)
                    continue
                try:
                    await run.open()
                except Exception as exc:  # its clusters do not answer: the others go on
                    log.warning("%s: cannot connect for Spark yet (%r); trying again in %.0fs",
                                name, exc, self._holds.failed(name))
                    continue
                self.runs[name] = run
            wanted[name] = parts
        self.broken = broken
        for gone in set(self._refused) - set(broken):
            del self._refused[gone]
        await self.query.apply(wanted, drain=not self.fenced)
        for name in [n for n in self.runs if not wanted.get(n)]:
            await self.runs.pop(name).close()

    # -- heartbeats and fencing ---------------------------------------------------------
    def owned(self) -> list[flows_pb2.PartitionStatus]:
        return [p for r in self.runs.values() for p in r.partitions()]

    def _beat(self) -> coordinator_pb2.WorkerHeartbeat:
        return coordinator_pb2.WorkerHeartbeat(
            worker_id=self.worker_id, address=self.address, applied_offset=self.acted_offset,
            partitions=self.owned(), started_at_ms=self._started_ms, kind=KIND,
            ui_address=self._driver.ui_address, problem=self.problem)
