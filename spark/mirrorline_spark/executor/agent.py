"""The executor as a worker of kind `spark` under the controller.

Like a replicator worker it replays the control log, runs what the log assigns to its
id, heartbeats (once a second, or four times per lease if that is more often) with the
control-log offset it has acted on and the partitions it runs, and fences itself (stops
every query) by the clock when no heartbeat has succeeded for three quarters of its lease
-- the controller waits for the whole lease before handing the partitions to someone
else. Following the log, heartbeats and fencing are the replicator workers' own
(`mirrorline.controlplane.agent.PartitionAgent`). It acts on an offset only once every hand-over
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
import logging
import time
from typing import Any

from mirrorline.controlplane.agent import PartitionAgent
from mirrorline.controlplane.log import ControlLog
from mirrorline.core.flowdefs import Definition
from mirrorline.core.settings import FlowSettings, MirrorSettings
from mirrorline.telemetry.replication import ReplicationMetrics
from mirrorline.v1 import flows_pb2
from mirrorline_spark.executor.driver import SparkDriver
from mirrorline_spark.executor.flowrun import FlowRun
from mirrorline_spark.executor.holds import Holds
from mirrorline_spark.executor.query import ExecutorQuery

log = logging.getLogger(__name__)

PROBLEM_HOLD_S = 30.0
KIND = "spark"


class SparkAgent(PartitionAgent):
    label = "executor"
    retry_s = 2.0

    def __init__(self, deployment: MirrorSettings, control: ControlLog, *, worker_id: str,
                 address: str, driver: SparkDriver, metrics: ReplicationMetrics,
                 workdir: str) -> None:
        super().__init__(deployment, control, worker_id=worker_id, address=address)
        self._driver = driver
        self._metrics = metrics
        self.runs: dict[str, FlowRun] = {}
        self._holds = Holds()
        self.query = ExecutorQuery(driver, self.runs, worker_id=worker_id, workdir=workdir,
                                   holds=self._holds)
        self._problem_cleared_at: float | None = None

    @property
    def problem(self) -> str:
        return self.query.problem or ""

    async def start_more(self) -> None:
        await self.query.start()

    async def stop_more(self) -> None:
        await self.query.stop()
        await asyncio.gather(*(r.close() for r in self.runs.values()), return_exceptions=True)
        self.runs.clear()

    # -- following the log --------------------------------------------------------------
    def follow_failed(self, reason: str) -> None:
        # A cluster or Spark hiccup: said once, tried again.
        self._log.warning("executor %s: cannot apply the control log yet: %s",
                          self.worker_id, reason)

    async def act(self, offset: int) -> None:
        await self._apply()
        self.acted_offset = offset

    async def _apply(self) -> None:
        state = self.control.state
        mine = self.mine(lambda topic, partition: (topic, partition))
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
                run = self.build(name, definition, broken, self._run_for,
                                 prefix=f"executor {self.worker_id}: ")
                if run is None:
                    continue
                try:
                    await run.open()
                except Exception as exc:  # its clusters do not answer: the others go on
                    log.warning("%s: cannot connect for Spark yet (%r); trying again in %.0fs",
                                name, exc, self._holds.failed(name))
                    continue
                self.runs[name] = run
            wanted[name] = parts
        self.settle_broken(broken)
        await self.query.apply(wanted, drain=not self.fenced)
        for name in [n for n in self.runs if not wanted.get(n)]:
            await self.runs.pop(name).close()

    def _run_for(self, settings: FlowSettings) -> FlowRun:
        return FlowRun(settings, metrics=self._metrics, worker_id=self.worker_id)

    # -- heartbeats ---------------------------------------------------------------------
    def owned(self) -> list[flows_pb2.PartitionStatus]:
        return [p for r in self.runs.values() for p in r.partitions()]

    def beat_fields(self) -> dict[str, Any]:
        return {"kind": KIND, "ui_address": self._driver.ui_address,
                "problem": self.problem}
