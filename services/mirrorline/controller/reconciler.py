"""The leader's loop: keep the control log's assignment in line with discovery and workers."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from mirrorline.controller.discovery import Discoveries
from mirrorline.controller.workers import WorkerRegistry
from mirrorline.core.assignment import PartitionKey
from mirrorline.core.control import ControlState, Outcome, partition_refs
from mirrorline.core.errors import ConfigError, one_line
from mirrorline.core.flowdefs import Definition, flow_settings
from mirrorline.core.offload import OffloadPolicy
from mirrorline.core.reconcile import plan
from mirrorline.core.settings import MirrorSettings
from mirrorline.v1 import control_pb2

log = logging.getLogger(__name__)

#: How often measured loads may move partitions even though no worker came or went.
LOAD_REVIEW_S = 300.0

Append = Callable[[control_pb2.ControlRecord], Awaitable[tuple[int, Outcome]]]


class Reconciler:
    def __init__(self, deployment: MirrorSettings, discoveries: Discoveries,
                 registry: WorkerRegistry) -> None:
        self._deployment = deployment
        self._discoveries = discoveries
        self._registry = registry
        self._known_live: frozenset[str] = frozenset()
        self._last_review = time.monotonic()
        #: Partitions revoked to be moved -> the worker they were moved for (this term only).
        self._destined: dict[PartitionKey, str] = {}
        #: Flows whose definition no longer fits the deployment (e.g. a cluster removed)
        #: or cannot be applied at all.
        self.broken: dict[str, str] = {}
        #: The flow version each broken flow was refused at: not tried again until it
        #: changes, so one bad record costs one attempt, not one per round.
        self._refused: dict[str, int] = {}
        #: Which partitions run on the Spark executor (issue 8).
        self.offload = OffloadPolicy()

    def reset(self) -> None:
        self._known_live = frozenset()
        self._last_review = time.monotonic()
        self._destined.clear()

    async def step(self, state: ControlState, epoch: int, controller_id: str,
                   append: Append) -> bool:
        """One round; False when this controller turned out to be deposed."""
        tracked = []
        broken: dict[str, str] = {}
        for name, record in state.flows.items():
            if self._refused.get(name) == record.version and name in self.broken:
                broken[name] = self.broken[name]
                continue
            try:
                settings = flow_settings(self._deployment,
                                         Definition(record.source, record.target,
                                                    record.properties))
            except ConfigError as exc:
                broken[name] = f"the flow does not fit this deployment: {exc}"
            except Exception as exc:  # any failure is this flow's; the others go on
                broken[name] = f"its definition cannot be applied: {one_line(exc)}"
                log.debug("flow %s: applying its definition failed", name, exc_info=True)
            else:
                tracked.append((settings, record.version))
                continue
            self._refused[name] = record.version
        for name in sorted(broken):
            if broken[name] != self.broken.get(name):  # said once per reason
                log.warning("flow %s is not run: %s", name, broken[name])
        for name in self._refused.keys() - broken.keys():
            del self._refused[name]
        self.broken = broken
        self._discoveries.broken = broken
        self._discoveries.sync(tracked)
        paused = {n for n, r in state.flows.items() if r.paused}
        await self._discoveries.refresh_due(paused)
        if self._registry.in_grace():
            return True  # let every worker find the new leader before assigning anything
        live = frozenset(self._registry.live())
        review = time.monotonic() - self._last_review >= LOAD_REVIEW_S
        joined = live - self._known_live
        # Moves only for a periodic load review (anywhere) or towards workers that joined;
        # a worker leaving moves nothing but its own partitions.
        allow_moves = bool(joined) or review
        receivers = None if review else joined
        desired = self._discoveries.desired()
        waiting = self._discoveries.undiscovered()
        desired.update({k: o.remote_topic for k, o in state.owners.items() if k.flow in waiting})
        spark = self._registry.spark_workers()
        able = self._registry.spark_executors()
        on_spark = self.offload.decide(
            time.monotonic(), list(desired), {s.name: s.offload for s, _ in tracked},
            self._registry.partition_loads(), state.placements,
            {k for k, o in state.owners.items() if o.worker_id in spark}, bool(able))
        result = plan(state, desired, live, self._registry.reports(),
                      self._registry.loads(),
                      expired=self._registry.expired(state.workers()), allow_moves=allow_moves,
                      destined=self._destined, receivers=receivers,
                      spark=spark, on_spark=on_spark, spark_unable=spark - able)
        for key in [k for k in self._destined if k in state.owners or k not in desired]:
            del self._destined[key]  # arrived (or gone)
        self._destined.update(result.moving)
        for worker in result.expire:
            log.warning("worker %s: lease expired; its partitions are reassigned", worker)
            if not await self._emit(append, epoch, controller_id,
                                    worker_expired=control_pb2.WorkerExpired(worker_id=worker)):
                return False
        for (flow, worker), keys in sorted(result.revoke.items()):
            log.info("%s: revoking %d partitions from %s", flow, len(keys), worker)
            if not await self._emit(append, epoch, controller_id,
                                    partitions_revoked=control_pb2.PartitionsRevoked(
                                        flow=flow, worker_id=worker,
                                        partitions=partition_refs(keys))):
                return False
        for (flow, worker), keys in sorted(result.grant.items()):
            log.info("%s: assigning %d partitions to %s", flow, len(keys), worker)
            if not await self._emit(append, epoch, controller_id,
                                    partitions_assigned=control_pb2.PartitionsAssigned(
                                        flow=flow, worker_id=worker,
                                        partitions=partition_refs(keys))):
                return False
        self._known_live = live
        if review:
            self._last_review = time.monotonic()
        return True

    @staticmethod
    async def _emit(append: Append, epoch: int, controller_id: str, **event: object) -> bool:
        record = control_pb2.ControlRecord(epoch=epoch, controller_id=controller_id,
                                           **event)  # type: ignore[arg-type]
        _, outcome = await append(record)
        return outcome is not Outcome.STALE
