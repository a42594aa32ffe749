"""Exactly-once mode: each delivery round commits in one transaction on the target.

Asked for with MM2's KIP-618 keys (`mirrorline.core.exactly_once`) and run only where the
probe showed that the target and this client can run transactions. A round takes the next
batch of every ready partition and, in one transaction of the flow's transactional
producer, writes

1. the batches (each to its remote partition, in source order),
2. the progress record of every partition in the round (`mm2-offsets.<src>.internal`),
3. the offset-map runs of the round, and the offset syncs it produces when the
   offset-syncs topic lives on the target,

then commits. `read_committed` consumers therefore see either the whole round -- records,
and the bookkeeping that describes them -- or nothing of it, and durable progress is
exactly what the target holds: a new owner resumes from it without matching any tail.
Offset syncs that live on the source cluster cannot join a target transaction; they are
planned and written after the commit by the flow's ordinary sync sender (as MM2 does).

Failures:
* anything but fencing (send error, commit error, timeout): the transaction is aborted
  (best effort) and the producer is replaced by a new one with the same transactional id,
  whose InitProducerId makes the coordinator finish whatever the old one left open. When
  the commit itself failed its outcome is unknown, so the committed progress is read back
  (read_committed) and decides, per partition, whether the round landed; every partition
  whose round did not land sends the same records again from its last committed progress.
* fencing (`ProducerFenced`, `InvalidProducerEpoch`): a newer producer with the same id
  took over -- a restarted incarnation of this owner. The partition set stops here,
  nothing more is sent with this producer, and the flow reports why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import InvalidProducerEpoch, KafkaTimeoutError, ProducerFenced

from mirrorline.core.backoff import Backoff
from mirrorline.core.offset_syncs import OffsetSyncPlanner
from mirrorline.core.progress import encode_offset, progress_topic, source_offset_key
from mirrorline.kafka.bookkeeping import _append_run
from mirrorline.kafka.metadata import require_partition
from mirrorline.kafka.progress import read_progress
from mirrorline.replicator.delivery import DeliveryLoop, Fetch, OnAck
from mirrorline.replicator.pump import PartitionPump, oversized
from mirrorline.v1 import offset_map_pb2

log = logging.getLogger(__name__)

#: Errors that mean another producer with our transactional id has taken over.
FENCED = (ProducerFenced, InvalidProducerEpoch)
#: How long an abort may take before the producer is replaced without it.
ABORT_TIMEOUT_S = 5.0
#: How long a commit may take before its outcome counts as unknown (aiokafka would wait
#: for ever while the coordinator is unreachable).
COMMIT_TIMEOUT_S = 30.0

#: (topic, partition or None for the key's default partition, key, value)
Extra = tuple[str, int | None, bytes | None, bytes]
#: Closes the failed transactional producer and opens a new one with the same id,
#: retrying until the target answers.
Recover = Callable[[Any], Awaitable[Any]]
#: The committed progress (next source offset) of some source partitions.
Committed = Callable[[Collection[TopicPartition]], Awaitable[Mapping[tuple[str, int], int]]]


@dataclass
class RoundBooks:
    """The bookkeeping records of one round, built while the transaction is open."""

    source_alias: str
    map_topic: str
    #: Set when the offset-syncs topic lives on the target (syncs join the transaction).
    planner: OffsetSyncPlanner | None = None
    syncs_topic: str | None = None

    def records(self, sent: Sequence[tuple[PartitionPump, int]]) -> list[Extra]:
        """Progress, offset-map and (target-side) offset-sync records for `sent`: each
        pump's batch in flight written at the given base offset."""
        extras: list[Extra] = []
        topic = progress_topic(self.source_alias)
        for pump, base in sent:
            shipment = pump.sending
            assert shipment is not None
            extras.append((topic, None, source_offset_key(self.source_alias, pump.source_topic,
                                                          pump.partition),
                           encode_offset(shipment.last_offset)))
            offsets = shipment.offsets()
            message = offset_map_pb2.OffsetMapRecord(topic=pump.source_topic,
                                                     partition=pump.partition)
            start = 0
            for i in range(1, len(offsets) + 1):  # one run per stretch without gaps
                if i == len(offsets) or offsets[i] != offsets[i - 1] + 1:
                    _append_run(message, offsets[start], i - start, base + start)
                    start = i
            extras.append((self.map_topic, 0, f"{pump.source_topic}/{pump.partition}".encode(),
                           message.SerializeToString()))
            if self.planner is not None:
                self.planner.queue_batch(pump.source_topic, pump.partition, offsets, base)
        if self.planner is not None and self.syncs_topic is not None:
            self.planner.promote_delayed()  # a committed round is an exact point: sync it
            for sync in self.planner.take_pending(self.planner.pending_count):
                extras.append((self.syncs_topic, 0, sync.encode_key(), sync.encode_value()))
        return extras

    def rolled_back(self, pumps: Sequence[PartitionPump]) -> None:
        """Forget sync state built from a round that did not commit: the next committed
        batch of each partition then syncs afresh."""
        if self.planner is not None:
            for pump in pumps:
                self.planner.forget(pump.source_topic, pump.partition)


class TransactionalDelivery(DeliveryLoop):
    """The delivery loop of a flow in exactly-once mode (same interface as DeliveryLoop,
    which the flow uses for at-least-once mode, unchanged)."""

    def __init__(self, producer: Any, pumps: Mapping[TopicPartition, PartitionPump], *,
                 fetch: Fetch, on_ack: OnAck, books: RoundBooks, recover: Recover,
                 committed: Committed, on_fenced: Callable[[str], None],
                 poll_timeout_ms: int = 1000) -> None:
        super().__init__(producer, pumps, fetch=fetch, on_ack=on_ack,
                         poll_timeout_ms=poll_timeout_ms)
        self._books = books
        self._recover = recover
        self._committed = committed
        self._on_fenced = on_fenced
        self._round: asyncio.Task[None] | None = None
        self.rounds_committed = 0
        self.rounds_aborted = 0
        self.fenced: str | None = None
        #: Set by `settle_all` (the producer was aborted): a commit under way stops waiting.
        self._interrupt = asyncio.Event()

    async def run(self) -> None:
        while not self._stopping and self.fenced is None:
            if self.producer is None:  # being replaced (`abort_sends`): wait for it
                self.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), 1.0)
                continue
            busy = any(p.ready(time.monotonic()) for p in self._pumps.values())
            await self._fetch(0 if busy else self._poll_timeout_ms)
            if self._stopping:
                break
            if not any(p.ready(time.monotonic()) for p in self._pumps.values()):
                await self._settle_some()  # nothing in flight: waits for a retry or a wake
                continue
            # A round runs to its end (commit or abort) even when the loop is cancelled:
            # `drain` waits for it, so a stop never leaves a transaction half-handled.
            self._round = asyncio.ensure_future(self.round())
            try:
                await asyncio.shield(self._round)
            except asyncio.CancelledError:
                if not self._round.cancelled():
                    raise  # this loop was cancelled, not the round (`drain` did that)

    async def round(self) -> None:
        """One transaction: the next batch of every ready partition, with its bookkeeping."""
        producer = self.producer
        now = time.monotonic()
        pumps = [p for p in self._pumps.values() if p.ready(now)]
        if producer is None or not pumps:
            return
        batches = []
        for pump in pumps:
            batch = pump.build(producer)
            refusal = oversized(batch, producer)
            if refusal is not None:  # stops that partition; the round goes on without it
                pump.failed(refusal, now)
                continue
            try:  # a remote topic grown since the producer last looked
                await require_partition(producer, pump.target_topic, pump.partition)
            except Exception as exc:  # retried with backoff; the round goes on without it
                pump.failed(exc, now)
                continue
            batches.append((pump, batch))
        pumps = [pump for pump, _ in batches]
        if not pumps:
            self._settled.set()
            return
        sent: list[tuple[PartitionPump, int]] = []
        committing = False
        try:
            await producer.begin_transaction()
            futures = [await producer.send_batch(batch, pump.target_topic,
                                                 partition=pump.partition)
                       for pump, batch in batches]
            metadata = await _all(futures)
            sent = [(pump, meta.offset) for (pump, _), meta in zip(batches, metadata,
                                                                     strict=True)]
            extras = [await producer.send(topic, key=key, value=value, partition=partition)
                      for topic, partition, key, value in self._books.records(sent)]
            await _all(extras)
            committing = True
            await self._bounded(producer.commit_transaction(), COMMIT_TIMEOUT_S)
        except FENCED as exc:
            self._fence(pumps, exc)
            return
        except Exception as exc:
            await self._abort(producer, pumps, sent, exc, ambiguous=committing)
            return
        finally:
            self._settled.set()
        self.rounds_committed += 1
        for pump, base in sent:
            self._on_ack(pump, pump.acknowledged(base))

    async def _abort(self, producer: Any, pumps: Sequence[PartitionPump],
                     sent: Sequence[tuple[PartitionPump, int]], exc: BaseException, *,
                     ambiguous: bool) -> None:
        """Undo a round that failed: abort, replace the producer, and send again whatever
        the committed progress does not cover."""
        self.rounds_aborted += 1
        log.warning("transaction of %d batches failed (%r); aborting it and sending them "
                    "again from the committed progress", len(pumps), exc)
        # `abort_sends` (stopping, or the worker lost its lease) took the producer away
        # already; the flow opens the next one itself.
        external = self.producer is not producer
        self.producer = None
        if not external:  # an aborted producer cannot end its transaction any more
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.abort_transaction(), ABORT_TIMEOUT_S)
        self._books.rolled_back(pumps)
        replacement = None
        landed: Mapping[tuple[str, int], int] = {}
        if not external:
            # The same transactional id: InitProducerId completes or aborts what the old
            # producer left open before the new one may write, so the progress read next
            # is final.
            replacement = await self._recover(producer)
            if ambiguous:
                landed = await self._committed([TopicPartition(p.source_topic, p.partition)
                                                for p in pumps])
        bases = {id(pump): base for pump, base in sent}
        now = time.monotonic()
        for pump in pumps:
            shipment = pump.sending
            assert shipment is not None
            if landed.get((pump.source_topic, pump.partition), -1) > shipment.last_offset:
                # The commit went through although the client saw an error.
                self._on_ack(pump, pump.acknowledged(bases[id(pump)]))
            elif ambiguous and external:
                # Whether it committed is known only to the next owner, which resumes
                # from the committed progress: sending again here could copy it twice.
                pump.stop()
                pump.rolled_back(exc, now)
                pump.error = (f"transaction outcome unknown after the producer was aborted "
                              f"({exc!r}); stopped, resuming from the committed progress")
            else:
                pump.rolled_back(exc, now)
        if replacement is not None:
            self.producer = replacement
            self.wake.set()

    def _fence(self, pumps: Sequence[PartitionPump], exc: BaseException) -> None:
        """Another producer with this transactional id took over: stop every partition
        (nothing of the open transaction can commit any more) and say so."""
        self.fenced = (f"fenced by a newer producer with the same transactional id "
                       f"({exc!r}); this owner stops its partitions for the hand-over")
        log.error("%s", self.fenced)
        self.producer = None
        now = time.monotonic()
        for pump in self._pumps.values():
            pump.stop()
            pump.error = self.fenced
        for pump in pumps:
            if pump.in_flight:
                pump.rolled_back(exc, now)  # stopped: clears the batch, queues nothing
        self._on_fenced(self.fenced)

    async def drain(self, timeout: float) -> bool:
        """Stop starting rounds; wait (bounded) for the round under way to commit or abort."""
        self._stopping = True
        self.wake.set()
        if self._round is None or self._round.done():
            return True
        done, _ = await asyncio.wait([self._round], timeout=timeout)
        if done:
            return True
        if self.producer is None:
            # Replacing the producer after a failed round (the target does not answer):
            # there is nothing left to abort, and nothing of the round can commit.
            self._round.cancel()
            await asyncio.gather(self._round, return_exceptions=True)
            return True
        return False

    async def settle_all(self) -> None:
        """After the producer was aborted the round under way fails and ends: its sends
        fail at once, and a commit under way stops waiting (its outcome is unknown)."""
        if self._round is not None and not self._round.done():
            self._interrupt.set()
            try:
                await asyncio.wait([self._round])
            finally:
                self._interrupt.clear()

    async def _bounded(self, operation: Awaitable[Any], timeout: float) -> Any:
        """`operation`, unless `timeout` passes or `settle_all` interrupts it first."""
        task = asyncio.ensure_future(operation)
        interrupted = asyncio.ensure_future(self._interrupt.wait())
        try:
            done, _ = await asyncio.wait({task, interrupted}, timeout=timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            interrupted.cancel()
        if task in done:
            return task.result()
        task.cancel()
        raise KafkaTimeoutError("the transaction did not end in time"
                                if not self._interrupt.is_set() else
                                "the producer was aborted while the transaction ended")


async def _all(futures: Sequence[Awaitable[Any]]) -> list[Any]:
    """Every result, or the first error once all have settled (none left unobserved)."""
    results = await asyncio.gather(*futures, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


async def committed_progress(flow: str, target_consumer: Mapping[str, Any], source_alias: str,
                             partitions: Collection[TopicPartition], backoff: Backoff
                             ) -> dict[tuple[str, int], int]:
    """The committed progress of `partitions` (`target_consumer` reads read_committed),
    retrying with backoff while the target cannot be read."""
    wanted = {(tp.topic, tp.partition) for tp in partitions}
    attempt = 0
    while True:
        try:
            found = await read_progress(target_consumer, source_alias)
            return {key: offset for key, offset in found.items() if key in wanted}
        except Exception as exc:
            delay = backoff.delay(attempt)
            attempt += 1
            log.warning("%s: cannot read the committed progress (%r); retrying in %.1fs",
                        flow, exc, delay)
            await asyncio.sleep(delay)
