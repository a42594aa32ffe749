"""Drives every pump of a flow in rounds: fetch, build all ready batches, settle acks.

Throughput in Python comes from doing work in the same shape as the network wants it:
each round takes whatever the consumer has prefetched, builds the next batches of every
partition with room in flight (one batch, or up to the producer's pipelining depth,
`mirrorline.kafka.pipelining`) and hands them all to the producer before yielding, so
they leave together; then it waits for acknowledgements (or a retry deadline, or new
records when nothing is in flight) and settles them. A partition whose batch failed
waits out its backoff without holding up the others.

A partition's batches are queued in the order they were built (each send waits until
its predecessor is queued, and is not queued at all if that one was not) and settled in
that order. When the oldest fails, the ones after it are settled with it, once each has
ended: the partition then checks the target for all of them (`PartitionPump.failed`),
and the flow hears the oldest's failure and those of the others (an out-of-order
refusal among them replaces the producer).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition

from mirrorline.kafka.metadata import require_partition
from mirrorline.kafka.producer_abort import SendAborted
from mirrorline.replicator.pump import Delivered, PartitionPump, oversized

log = logging.getLogger(__name__)

#: Fetch records into the pumps; `timeout_ms` is how long it may wait for new ones.
Fetch = Callable[[int], Awaitable[None]]
#: Called for every acknowledged batch (progress, offset syncs, metrics).
OnAck = Callable[[PartitionPump, Delivered], None]
#: Called for every batch that failed, with why (the pump may need its target checked).
OnFailed = Callable[[PartitionPump, BaseException], None]
#: Called once when the oldest batch in flight has waited `stall_after_s`, with its age.
OnStalled = Callable[[float], None]
#: Fetches under way whose answers should wake the loop (the batch path's own fetches).
FetchWaiters = Callable[[], Collection[asyncio.Future[Any]]]
#: How long `settle_all` lets queued batches end with their aborted producer's failure.
_ABORTED_SETTLE_S = 5.0


async def _send(producer: AIOKafkaProducer, batch: Any, pump: PartitionPump,
                queued: Callable[[asyncio.Future[Any]], None],
                after: asyncio.Future[None] | None, enqueued: asyncio.Future[None]) -> Any:
    """Queue `batch` for the pump's partition once the send before it (`after`) queued
    its own, set `enqueued`, tell `queued` this send's task, and wait for its
    acknowledgement."""
    try:
        if after is not None:
            await asyncio.shield(after)
        await require_partition(producer, pump.target_topic, pump.partition)
        delivered = await producer.send_batch(batch, pump.target_topic,
                                              partition=pump.partition)
    except BaseException as exc:
        if not enqueued.done():
            enqueued.set_exception(SendAborted(f"not queued, as the batch before it was "
                                               f"not: {exc!r}"))
        raise
    enqueued.set_result(None)
    task = asyncio.current_task()
    if task is not None:
        queued(task)
    return await delivered


def _consume(future: asyncio.Future[Any]) -> None:
    """Retrieve a future's failure, which its waiters (if any) report."""
    if not future.cancelled():
        future.exception()


def _failure(future: asyncio.Future[Any]) -> BaseException | None:
    if future.cancelled():
        return SendAborted("cancelled before it was queued: the producer was aborted")
    return future.exception()


class DeliveryLoop:
    def __init__(self, producer: AIOKafkaProducer, pumps: Mapping[TopicPartition, PartitionPump],
                 *, fetch: Fetch, on_ack: OnAck, on_failed: OnFailed | None = None,
                 poll_timeout_ms: int = 1000, stall_after_s: float | None = None,
                 on_stalled: OnStalled | None = None,
                 fetch_waiters: FetchWaiters | None = None) -> None:
        """`stall_after_s` / `on_stalled`: an idempotent aiokafka producer never expires a
        batch whose partition leader it still knows, however long the leader is
        unreachable; the batch then waits, unseen, for the whole outage. The loop says so
        once the oldest batch in flight has waited this long (the flow aborts the sends,
        and its partitions check the target, as after an expired batch)."""
        #: Replaced by the flow after an abort; None while no producer can send.
        self.producer: AIOKafkaProducer | None = producer
        self._on_failed = on_failed
        self._fetch_waiters = fetch_waiters
        self._stall_after_s = stall_after_s
        self._on_stalled = on_stalled
        self._stall_said = False
        self._launched_at: dict[asyncio.Future[Any], float] = {}
        #: Sends whose batch is in the producer's queue (an abort fails those itself).
        self._queued: set[asyncio.Future[Any]] = set()
        self._pumps = pumps
        self._fetch = fetch
        self._on_ack = on_ack
        self._poll_timeout_ms = poll_timeout_ms
        self._in_flight: dict[asyncio.Future[Any], PartitionPump] = {}
        #: Each pump's sends in flight, oldest first, with the future each sets once its
        #: batch is queued (the next send of the pump waits for it).
        self._sends: dict[PartitionPump, deque[tuple[asyncio.Future[Any],
                                                     asyncio.Future[None]]]] = {}
        self._stopping = False
        self._settled = asyncio.Event()
        self.wake = asyncio.Event()

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    async def run(self) -> None:
        while not self._stopping:
            # Launch first: turning freshly fetched bytes into records is the most expensive
            # step, so let batches travel while it happens rather than after it.
            await self._launch(time.monotonic())
            busy = bool(self._in_flight) or (self.producer is not None and any(
                p.ready(time.monotonic()) for p in self._pumps.values()))
            await self._fetch(0 if busy else self._poll_timeout_ms)
            await self._launch(time.monotonic())
            producer = self.producer
            for pump in self._pumps.values():
                if producer is not None and pump.can_prepare():
                    pump.prepare(producer)
            await self._settle_some()

    async def _launch(self, now: float) -> None:
        producer = self.producer
        if producer is None:
            return
        for pump in list(self._pumps.values()):
            while pump.ready(now) and not self._failing(pump):
                batch = pump.build(producer)
                refusal = oversized(batch, producer)
                if refusal is not None:
                    if pump.in_flight_count > 1:
                        # Batches before it travel: it settles after them, in order.
                        self._launch_refused(pump, refusal, now)
                    else:
                        pump.failed(refusal, now)
                    break
                # A send of its own: queueing may wait (for the remote topic's metadata, for
                # room), and a producer aborted meanwhile never ends that wait, so the loop
                # must not sit in it; `settle_all` cancels such a send.
                sends = self._sends.setdefault(pump, deque())
                after = sends[-1][1] if sends else None
                enqueued: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                enqueued.add_done_callback(_consume)
                send = asyncio.ensure_future(_send(producer, batch, pump, self._queued.add,
                                                   after, enqueued))
                sends.append((send, enqueued))
                self._in_flight[send] = pump
                self._launched_at[send] = now

    def _failing(self, pump: PartitionPump) -> bool:
        """A send of the pump failed: nothing more of it goes before that one settled."""
        return any(send.done() and _failure(send) is not None
                   for send, _ in self._sends.get(pump, ()))

    def _launch_refused(self, pump: PartitionPump, refusal: BaseException,
                        now: float) -> None:
        """A refused batch behind others in flight: a send that fails at once, settled
        in its turn."""
        failed: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        failed.set_exception(refusal)
        enqueued: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        enqueued.set_exception(SendAborted("refused before it was queued"))
        enqueued.add_done_callback(_consume)
        self._sends.setdefault(pump, deque()).append((failed, enqueued))
        self._in_flight[failed] = pump
        self._launched_at[failed] = now

    async def _settle_some(self) -> None:
        """Wait for an acknowledgement, a retry deadline or a wake-up; settle what is done."""
        if not self._in_flight:
            deadline = self._next_retry()
            if self.producer is None:
                # No producer until the flow opened a new one (it sets `wake`): nothing
                # can be sent, so wait for it rather than spin.
                self.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), self._poll_timeout_ms / 1000)
            elif deadline is not None:
                self.wake.clear()
                timeout = max(0.0, deadline - time.monotonic())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), timeout)
            return
        wait_s = self._retry_timeout()
        stall_at = self._stall_deadline()
        if stall_at is not None:
            left = max(0.0, stall_at - time.monotonic())
            wait_s = left if wait_s is None else min(wait_s, left)
        # Sends ended but not settled wait for an older one of their partition.
        waiting: set[asyncio.Future[Any]] = {f for f in self._in_flight if not f.done()}
        if not waiting:
            self._settle(set(self._in_flight))
            return
        if self._fetch_waiters is not None:
            waiting.update(self._fetch_waiters())
        done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED,
                                     timeout=wait_s)
        self._settle(done)
        stall_at = self._stall_deadline()
        if stall_at is not None and time.monotonic() >= stall_at and not self._stall_said:
            self._stall_said = True
            assert self._on_stalled is not None and self._stall_after_s is not None
            self._on_stalled(time.monotonic() - stall_at + self._stall_after_s)

    def _stall_deadline(self) -> float | None:
        """When the oldest batch in flight counts as stalled (None: not watched, or none)."""
        if self._stall_after_s is None or self._on_stalled is None or not self._launched_at:
            return None
        return min(self._launched_at.values()) + self._stall_after_s

    async def wait_settled(self, pump: PartitionPump, timeout: float) -> bool:
        """Wait until `pump` has no batch in flight; False if `timeout` passed first."""
        deadline = time.monotonic() + timeout
        while pump.in_flight:
            self._settled.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._settled.wait(), remaining)
        return True

    def _settle(self, done: set[asyncio.Future[Any]]) -> None:
        self._settled.set()
        now = time.monotonic()
        pumps: dict[PartitionPump, None] = {}
        for future in done:
            pump = self._in_flight.get(future)
            if pump is not None:  # else settled by a concurrent waiter already
                pumps[pump] = None
        for pump in pumps:
            self._settle_pump(pump, now)
        if not self._in_flight:
            self._stall_said = False

    def _forget(self, future: asyncio.Future[Any]) -> None:
        self._launched_at.pop(future, None)
        self._queued.discard(future)
        self._in_flight.pop(future, None)

    def _settle_pump(self, pump: PartitionPump, now: float) -> None:
        """Settle the pump's ended sends from its oldest on, in order."""
        sends = self._sends.get(pump)
        while sends and sends[0][0].done():
            head = sends[0][0]
            exc = _failure(head)
            if exc is None:
                sends.popleft()
                self._forget(head)
                self._on_ack(pump, pump.acknowledged(head.result().offset))
                continue
            if not all(send.done() for send, _ in sends):
                # Later batches still travel: they land (then the check finds them) or
                # fail (refused as out of order, or retried in order by the producer).
                return
            failures = [exc] + [e for e in (_failure(send) for send, _ in list(sends)[1:])
                                if e is not None]
            for send, _ in sends:
                self._forget(send)
            sends.clear()
            pump.failed(exc, now)
            if self._on_failed is not None:
                # The head's failure, and what refused those after it (an out-of-order
                # refusal means the producer must be replaced), once per kind.
                kinds: set[type[BaseException]] = set()
                for failure in failures:
                    if type(failure) not in kinds:
                        kinds.add(type(failure))
                        self._on_failed(pump, failure)
        if not sends:
            self._sends.pop(pump, None)

    def _next_retry(self) -> float | None:
        waiting = [p.retry_at for p in self._pumps.values()
                   if not p.in_flight and p.retry_at > time.monotonic() and not p.idle]
        return min(waiting) if waiting else None

    def _retry_timeout(self) -> float | None:
        deadline = self._next_retry()
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    async def drain(self, timeout: float) -> bool:
        """Stop launching; wait (bounded) for the batches in flight and settle them.
        False: some are still unacknowledged (the caller must abort them)."""
        self._stopping = True
        self.wake.set()
        if not self._in_flight:
            return True
        done, pending = await asyncio.wait(self._in_flight, timeout=timeout)
        self._settle(done)
        return not pending

    async def settle_all(self) -> None:
        """Settle every batch in flight after an abort: queued batches failed with their
        producer, and a send still waiting to be queued is cancelled, as the aborted
        producer would never queue it. Either way the pump's batch counts as failed, and
        its partition checks the target before sending those records again. A queued
        batch is not cancelled: it ends with the failure the abort gave it, whose reason
        (why the sends were aborted) is what its partition then reports."""
        for send in self._in_flight:
            if send not in self._queued:
                send.cancel()
        if self._in_flight:
            done, pending = await asyncio.wait(self._in_flight, timeout=_ABORTED_SETTLE_S)
            for send in pending:  # not failed by the abort after all: give up on it
                send.cancel()
            if pending:
                done |= (await asyncio.wait(pending))[0]
            self._settle(done)
