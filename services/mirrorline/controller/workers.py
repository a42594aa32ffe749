"""Worker leases and reports, kept by the leading controller from worker heartbeats.

A worker's lease is renewed by every heartbeat and lasts `lease_ms`. Workers fence
themselves well before that (they stop their partitions when they could not heartbeat
for three quarters of the lease), so when the controller sees a lease expire, the
worker has already stopped and its partitions can go elsewhere.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Protocol

import grpc

from mirrorline import grpcsecure
from mirrorline.core.assignment import PartitionKey
from mirrorline.core.reconcile import WorkerReport
from mirrorline.v1 import (
    coordinator_pb2,
    coordinator_pb2_grpc,
    flows_pb2,
    replicator_pb2,
    replicator_pb2_grpc,
)


@dataclass
class WorkerView:
    worker_id: str
    address: str
    last_seen: float            # monotonic
    last_seen_ms: int           # wall clock, for display
    applied_offset: int
    #: As of `applied_offset` (what releases are judged on).
    partitions: list[flows_pb2.PartitionStatus] = field(default_factory=list)
    #: A fresher answer to GetStatus, for display only.
    current: list[flows_pb2.PartitionStatus] | None = None

    @property
    def shown(self) -> list[flows_pb2.PartitionStatus]:
        return self.current if self.current is not None else self.partitions

    def report(self) -> WorkerReport:
        return WorkerReport(self.applied_offset, frozenset(
            PartitionKey(p.flow, p.source_topic, p.partition) for p in self.partitions))


#: A worker silent for its lease plus this long is forgotten (it is shown as not alive
#: meanwhile, so an operator sees it go).
PRUNE_GRACE_S = 60.0
#: Most workers one controller tracks: a flood of invented ids cannot grow it unbounded.
MAX_WORKERS = 1000


class WorkerRegistry:
    def __init__(self, lease_ms: int) -> None:
        self.lease_s = lease_ms / 1000.0
        self.workers: dict[str, WorkerView] = {}
        #: Other services that said where they serve (e.g. "checkpointer").
        self.services: dict[str, Announced] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}
        #: Monotonic time from which leases are judged (set when this controller leads).
        self.since = time.monotonic()

    def reset(self) -> None:
        """A new term: forget what an earlier term saw; judge leases from now on."""
        self.workers.clear()
        self.since = time.monotonic()

    def prune(self) -> None:
        """Forget workers silent for longer than their lease plus `PRUNE_GRACE_S`."""
        cutoff = time.monotonic() - self.lease_s - PRUNE_GRACE_S
        for worker_id in [w for w, v in self.workers.items() if v.last_seen < cutoff]:
            del self.workers[worker_id]

    def heartbeat(self, hb: coordinator_pb2.WorkerHeartbeat) -> bool:
        """Record a heartbeat; False when a new worker would exceed `MAX_WORKERS`."""
        self.prune()
        if hb.worker_id not in self.workers and len(self.workers) >= MAX_WORKERS:
            return False
        self.workers[hb.worker_id] = WorkerView(
            hb.worker_id, hb.address, time.monotonic(), int(time.time() * 1000),
            hb.applied_offset, list(hb.partitions))
        return True

    def live(self) -> set[str]:
        self.prune()
        now = time.monotonic()
        return {w for w, v in self.workers.items() if now - v.last_seen <= self.lease_s}

    def in_grace(self) -> bool:
        """Too soon after taking over to declare anyone dead (they may not have found us)."""
        return time.monotonic() - self.since <= self.lease_s

    def expired(self, holders: Collection[str]) -> set[str]:
        """Workers holding partitions whose lease is over (never expired during grace)."""
        if self.in_grace():
            return set()
        now = time.monotonic()
        return {w for w in holders
                if w not in self.workers or now - self.workers[w].last_seen > self.lease_s}

    async def refresh_statuses(self, timeout: float = 1.0) -> None:
        """Ask every live worker for its current partitions (heartbeats may be a second
        old); a worker that does not answer in time keeps its last heartbeat's view."""
        live = [self.workers[w] for w in self.live()]

        async def ask(view: WorkerView) -> None:
            channel = self.channel(view.address)
            try:
                status = await replicator_pb2_grpc.ReplicatorStub(channel).GetStatus(
                    replicator_pb2.GetReplicatorStatusRequest(), timeout=timeout)
            except grpc.aio.AioRpcError:
                return
            if self.workers.get(view.worker_id) is view:
                view.current = list(status.partitions)

        await asyncio.gather(*(ask(v) for v in live if v.address))

    def channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = grpcsecure.channel(address)
        return channel

    def service_address(self, service: str) -> str | None:
        """Where `service` serves, if it announced itself within the last lease or two."""
        found = self.services.get(service)
        if found is None or time.monotonic() - found.last_seen > 2 * max(self.lease_s, 5.0):
            return None
        return found.address

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()

    def reports(self) -> dict[str, WorkerReport]:
        return {w: v.report() for w, v in self.workers.items()}

    def loads(self) -> dict[PartitionKey, float]:
        return {PartitionKey(p.flow, p.source_topic, p.partition): p.bytes_per_second
                for v in self.workers.values() for p in v.partitions}


class LeaderCheck(Protocol):
    """Answers "am I the leader?" for RPC handlers, aborting with UNAVAILABLE if not."""

    async def require_leader(self, context: grpc.aio.ServicerContext[Any, Any]) -> int: ...


@dataclass
class Announced:
    instance_id: str
    address: str
    last_seen: float


class CoordinatorServicer(coordinator_pb2_grpc.CoordinatorServicer):
    def __init__(self, registry: WorkerRegistry, *, leader: LeaderCheck) -> None:
        self._registry = registry
        self._leader = leader

    async def Announce(self, request: coordinator_pb2.ServiceAnnouncement,
                       context: grpc.aio.ServicerContext[coordinator_pb2.ServiceAnnouncement,
                                                         coordinator_pb2.AnnounceReply]
                       ) -> coordinator_pb2.AnnounceReply:
        epoch = await self._leader.require_leader(context)
        if not request.service or not request.address:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "service and address are required")
        self._registry.services[request.service] = Announced(
            request.instance_id, request.address, time.monotonic())
        return coordinator_pb2.AnnounceReply(epoch=epoch)

    async def Heartbeat(self, request: coordinator_pb2.WorkerHeartbeat,
                        context: grpc.aio.ServicerContext[coordinator_pb2.WorkerHeartbeat,
                                                          coordinator_pb2.HeartbeatReply]
                        ) -> coordinator_pb2.HeartbeatReply:
        epoch = await self._leader.require_leader(context)
        if not request.worker_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "worker_id: required")
        if not self._registry.heartbeat(request):
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"this controller already tracks {MAX_WORKERS} workers")
        return coordinator_pb2.HeartbeatReply(lease_ms=int(self._registry.lease_s * 1000),
                                              epoch=epoch)
