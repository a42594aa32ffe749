"""The state of one source partition being copied to the same partition of its remote topic.

A pump holds what was fetched and not yet delivered -- record lists, and source batches
the batch path forwards as they are (`shipment.SourceBatch`) -- and up to `window`
batches in flight, in order. One (the default of a producer that does not pipeline), so
a batch the target rejects can never be overtaken by the next one (aiokafka would
otherwise send the following batch as soon as the failed one is unmuted); more with a
pipelining producer (`mirrorline.kafka.pipelining`), whose broker keeps them in order by
their sequence numbers. A failure then settles every batch in flight at once: none of
them is known to be on the target, and all are checked (or sent again) together, in
order. It does no I/O and owns no task: `mirrorline.replicator.delivery` drives every
pump of a flow in rounds, which keeps all partitions' batches in the same produce requests.

Failures are settled where they are understood:
* the target rejects a record (too large, corrupt): the batch is split in halves until
  the single offending record is found; everything before it is delivered, and the
  partition stops with an error naming topic, partition and offset -- never skipped;
* anything else (broker down, leader moving, timeouts, ACLs being fixed): the records
  may have reached the target all the same, so they are *checked* first: while the pump
  knows where its copies end on the target (`target_end`), the failed records wait
  (`unverified`) until the flow has read what is there after that end; only the records
  not found are sent again, after a backoff, with the reason shown in the status.
  Without a known end (started from durable progress alone) they are sent again as is.
"""

from __future__ import annotations

import enum
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka.errors import (
    CorruptRecordException,
    KafkaError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
)

from mirrorline.core.backoff import Backoff
from mirrorline.core.rejects import rejected_record
from mirrorline.core.tail_match import Landed
from mirrorline.kafka.batchbuilder import SourceBatchBuilder
from mirrorline.kafka.records import Record
from mirrorline.replicator.shipment import Shipment, SourceBatch

log = logging.getLogger(__name__)

#: Checks of a target that answers but cannot serve the records after a partition's known
#: end, before those records are sent again unchecked.
MAX_UNREADABLE_CHECKS = 3

#: Errors that mean "the target will never accept these bytes as they are".
RECORD_REJECTED = (MessageSizeTooLargeError, RecordListTooLargeError, RecordTooLargeError,
                   CorruptRecordException)


def oversized(batch: Any, producer: Any) -> MessageSizeTooLargeError | None:
    """The refusal of a batch holding one record above the producer's `max.request.size`.

    The Java producer (and so MM2, and librdkafka on the Spark path) refuses such a record
    before sending it. aiokafka's batch builder takes a batch's first record whatever its
    size, so without this check the replicator alone would copy it; with it, the
    partition stops at that record on every path, named the same way."""
    limit = getattr(producer, "_max_request_size", None)  # the producer actually sending
    if limit is None or batch.record_count() != 1:
        return None
    size = batch.size()
    if size <= limit:
        return None
    return MessageSizeTooLargeError(f"the record is {size} bytes, above max.request.size "
                                    f"({limit})")


def _rechunk(records: list[Record], sizes: Sequence[int], skip: int) -> list[list[Record]]:
    """`records` past the first `skip`, cut where batches of `sizes` records ended."""
    out: list[list[Record]] = []
    start = 0
    for size in list(sizes) or [len(records)]:
        chunk = records[max(start, skip):start + size]
        if chunk:
            out.append(chunk)
        start += size
    if start < len(records):
        out.append(records[max(start, skip):])
    return out


class PumpState(enum.Enum):
    RUNNING = "running"
    PAUSED = "paused"
    ERROR = "error"
    STOPPED = "stopped"


#: What waits in a pump: records to batch, or a source batch to forward as it is.
Chunk = list[Record] | SourceBatch


@dataclass(frozen=True)
class Delivered:
    """What the target acknowledged, and where its first record landed."""

    shipment: Shipment
    base_offset: int
    sent_ns: int
    #: Where this pump's acknowledged stretch went on from (its `next_offset` before): the
    #: source has no record between it and the first one (compaction, aborted transactions,
    #: transaction markers), since the consumer fetched from there.
    covered_from: int = -1


class PartitionPump:
    def __init__(self, *, flow: str, source_topic: str, target_topic: str, partition: int,
                 next_offset: int, backoff: Backoff | None = None) -> None:
        self.flow = flow
        self.source_topic = source_topic
        self.target_topic = target_topic
        self.partition = partition
        #: Everything below this source offset is acknowledged by the target.
        self.next_offset = next_offset
        #: The offset after the last record handed to this pump (where fetching continues).
        self.fetch_position = next_offset
        self.state = PumpState.RUNNING
        self.error: str | None = None
        #: Something an operator should know that is not an error (how it resumed).
        self.notice: str | None = None
        self.records_replicated = 0
        #: Source records removed before they could be copied (a gap on the target).
        self.records_lost = 0
        self.last_ack_record_ts: int | None = None
        #: How this partition's records are copied ("batches" or "records") and why, as
        #: decided for its latest fetch (`PartitionStatus.copy_path`).
        self.copy_path = "records"
        self.copy_path_reason = ""
        self._backoff = backoff or Backoff()
        self._backlog: deque[Chunk] = deque()
        #: Exact record lists to send next, in order (retries and halves of a split batch).
        self._forced: deque[list[Record]] = deque()
        #: Batches in flight, oldest first, with when each left (`time.time_ns`).
        self._in_flight: deque[tuple[Shipment, int]] = deque()
        #: How many batches may be in flight at once (the producer's pipelining depth).
        self.window = 1
        #: The next batch, built while the current one travels (shipment, producer batch).
        self._prepared: tuple[Shipment, Any] | None = None
        self._attempt = 0
        self._retry_at = 0.0
        #: One past this partition's last copy on the target, when known.
        self.target_end: int | None = None
        #: Target records found between this pump's batches (duplicates it detected).
        self.unexpected_records = 0
        self._unreadable = 0
        #: Records of a failed produce that may have landed; checked before re-sending.
        self.unverified: list[Record] | None = None
        #: How many records each failed batch of `unverified` held: sent again, they keep
        #: those bounds (a batch refused too large was already split).
        self._unverified_sizes: list[int] = []
        #: Batches commit in target transactions (`mirrorline.replicator.transactional`):
        #: commit markers and aborted records occupy target offsets between batches.
        self.transactional = False

    # -- fetch side -------------------------------------------------------------------
    def offer(self, records: list[Record]) -> None:
        """Queue freshly fetched records (in offset order)."""
        if not records or self.state is not PumpState.RUNNING:
            return
        # A fetch can repeat records after a seek; drop anything already queued.
        if records[0].offset < self.fetch_position:
            records = [r for r in records if r.offset >= self.fetch_position]
            if not records:
                return
        self._backlog.append(records)
        self.fetch_position = records[-1].offset + 1

    def offer_fetch(self, chunks: Sequence[Chunk], next_offset: int) -> None:
        """Queue what one raw fetch from `fetch_position` brought (already cut at that
        position), and continue fetching at `next_offset` (past batches left out)."""
        if self.state is not PumpState.RUNNING:
            return
        self._backlog.extend(chunks)
        self.fetch_position = max(self.fetch_position, next_offset)

    @property
    def backlog_chunks(self) -> int:
        return len(self._backlog) + len(self._forced) + (self._prepared is not None)

    @property
    def in_flight(self) -> bool:
        return bool(self._in_flight)

    @property
    def in_flight_count(self) -> int:
        return len(self._in_flight)

    @property
    def sending(self) -> Shipment | None:
        """What the oldest batch in flight carries."""
        return self._in_flight[0][0] if self._in_flight else None

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing in flight."""
        return (not self._backlog and not self._forced and not self._in_flight
                and self._prepared is None and self.unverified is None)

    @property
    def retry_at(self) -> float:
        return self._retry_at

    def ready(self, now: float) -> bool:
        return (self.state is PumpState.RUNNING and len(self._in_flight) < self.window
                and self.unverified is None
                and bool(self._prepared or self._backlog or self._forced)
                and now >= self._retry_at)

    def can_prepare(self) -> bool:
        """A batch travels and there are records for the next one: build it meanwhile."""
        return (self.state is PumpState.RUNNING and bool(self._in_flight)
                and self._prepared is None and bool(self._backlog or self._forced))

    def skip_to(self, offset: int, reason: str, lost: int = 0) -> None:
        """Move past `lost` source records that no longer exist (retention or DeleteRecords
        removed them); the partition's status says so from then on."""
        log.error("%s %s-%d: %s; continuing at offset %d", self.flow, self.source_topic,
                  self.partition, reason, offset)
        self._drop_queued()
        self.next_offset = self.fetch_position = offset
        self.records_lost += lost
        self.notice = (f"{reason}; continuing at offset {offset} "
                       f"({self.records_lost} lost since start)")

    def fail(self, reason: str, *, logged: bool = False) -> None:
        """Stop this partition for good (until an operator intervenes), loudly (`logged`:
        the caller has said so already)."""
        if not logged:
            log.error("%s %s-%d stopped: %s", self.flow, self.source_topic, self.partition,
                      reason)
        self.state = PumpState.ERROR
        self.error = reason
        self._drop_queued()
        self.fetch_position = self.next_offset

    def pause(self) -> None:
        """Stop sending (what is queued is fetched again on resume); positions stay."""
        if self.state is PumpState.RUNNING:
            self._drop_queued()
            self.fetch_position = self.next_offset
            self.state = PumpState.PAUSED

    def resume(self) -> None:
        if self.state is PumpState.PAUSED:
            self.fetch_position = self.next_offset
            self.state = PumpState.RUNNING

    def stop(self) -> None:
        """Send nothing more; what is queued is fetched again by whoever resumes."""
        self._drop_queued()
        self.fetch_position = self.next_offset
        if self.state is not PumpState.ERROR:
            self.state = PumpState.STOPPED

    # -- delivery ---------------------------------------------------------------------
    def _drop_queued(self) -> None:
        self.unverified = None
        self._backlog.clear()
        self._forced.clear()
        self._prepared = None

    def prepare(self, producer: Any) -> None:
        """Build the next batch now, so it can leave the moment the current one is acked."""
        self._prepared = self._fill(producer)

    def build(self, producer: Any) -> Any:
        """The next produce batch; it is in flight until `acknowledged`/`failed`."""
        if self._prepared is not None:
            shipment, batch = self._prepared
            self._prepared = None
        else:
            shipment, batch = self._fill(producer)
        self._in_flight.append((shipment, time.time_ns()))
        return batch

    def _fill(self, producer: Any) -> tuple[Shipment, Any]:
        if not self._forced and self._backlog and isinstance(self._backlog[0], SourceBatch):
            source = self._backlog.popleft()
            assert isinstance(source, SourceBatch)
            return (Shipment(batch=source),
                    SourceBatchBuilder(source.batch, transactional=self.transactional))
        batch = producer.create_batch()
        append = batch.append
        if self._forced:
            records = self._forced.popleft()
            for i, r in enumerate(records):
                if append(timestamp=r.timestamp, key=r.key, value=r.value,
                          headers=list(r.headers)) is None and i:
                    # More than a batch holds (a decoded source batch): the rest goes next.
                    self._forced.appendleft(records[i:])
                    records = records[:i]
                    break
        else:
            records = []
            while self._backlog:
                chunk = self._backlog[0]
                if isinstance(chunk, SourceBatch):
                    break  # it goes as it is, in a produce of its own
                n = 0
                for r in chunk:
                    if append(timestamp=r.timestamp, key=r.key, value=r.value,
                              headers=list(r.headers)) is None:
                        break
                    n += 1
                if n == len(chunk):
                    # The whole chunk fit: top the batch up from the next one, so batches
                    # stay full whatever sizes the broker's fetch responses come in.
                    records.extend(chunk)
                    self._backlog.popleft()
                    continue
                if n:
                    records.extend(chunk[:n])
                    self._backlog[0] = chunk[n:]
                break
            if not records and self._backlog:
                # aiokafka always takes a first record into an empty batch; should it ever
                # refuse, send that record alone (the broker's verdict then names it).
                chunk = self._backlog.popleft()
                assert not isinstance(chunk, SourceBatch)
                if len(chunk) > 1:
                    self._backlog.appendleft(chunk[1:])
                self._forced.appendleft(chunk[:1])
                return self._fill(producer)
        return Shipment(records=records), batch

    def acknowledged(self, base_offset: int) -> Delivered:
        """The oldest batch in flight was acknowledged, its first record at `base_offset`."""
        assert self._in_flight, "acknowledged() without a batch in flight"
        shipment, sent_ns = self._in_flight.popleft()
        if (self.target_end is not None and base_offset > self.target_end
                and not self.transactional):
            # Only this pump writes here, in order: anything in between is a produce the
            # client re-sent after the broker had accepted it (or another writer).
            extra = base_offset - self.target_end
            self.unexpected_records += extra
            log.warning("%s %s-%d: %d records on the target at offsets %d..%d were not "
                        "expected there (a produce the client retried after the broker had "
                        "written it, or another writer); detected, not undone", self.flow,
                        self.source_topic, self.partition, extra, self.target_end,
                        base_offset - 1)
        self._attempt = 0
        self.error = None
        covered_from = self.next_offset
        self.next_offset = shipment.next_offset
        self.target_end = base_offset + shipment.count
        self.records_replicated += shipment.count
        self.last_ack_record_ts = shipment.last_timestamp
        return Delivered(shipment, base_offset, sent_ns, covered_from)

    def _unprepare(self) -> None:
        """Put the batch built in advance back in front of its queue: it must not
        overtake the batch in flight, which is being settled."""
        if self._prepared is not None:
            shipment = self._prepared[0]
            self._prepared = None
            if shipment.batch is not None:
                self._backlog.appendleft(shipment.batch)
            else:
                assert shipment.records is not None
                self._forced.appendleft(list(shipment.records))

    def _settled_records(self) -> list[list[Record]] | None:
        """The records of every batch in flight (oldest first), now settled as not
        delivered; a source batch is decoded (it is checked and sent again as records).
        None: one cannot be decoded, and the partition stopped, saying why."""
        assert self._in_flight, "no batch in flight"
        shipments = [shipment for shipment, _ in self._in_flight]
        self._in_flight.clear()
        out: list[list[Record]] = []
        for shipment in shipments:
            try:
                out.append(shipment.as_records())
            except Exception as exc:
                self.fail(self._where(shipment.first_offset,
                                      f"the source batch cannot be decoded: {exc!r}"))
                return None
        return out

    def failed(self, exc: BaseException, now: float) -> None:
        """Settle the oldest batch in flight, which the producer could not deliver, and
        with it every batch sent after it: each waits for its predecessor on the broker, so
        none of them is known to be there either."""
        if self.state is not PumpState.RUNNING:
            self._in_flight.clear()
            return  # stopping or stopped: whoever resumes fetches these again
        self._unprepare()
        whole_batch = bool(self._in_flight) and self._in_flight[0][0].batch is not None
        settled = self._settled_records()
        if settled is None:
            return
        first, after = settled[0], settled[1:]
        if isinstance(exc, RECORD_REJECTED):
            # Refused, so not written, and neither were those after it (an idempotent
            # broker refuses a batch whose predecessor it lacks): all go again, in order.
            self._forced.extendleft(reversed(after))
            if whole_batch:  # refused as it is (too large for the target): re-batch it
                self._forced.appendleft(first)
                return
            if len(first) == 1:
                self.fail(self._where(first[0].offset, f"target rejected the record: {exc!r}"))
                return
            half = len(first) // 2
            self._forced.extendleft([first[half:], first[:half]])
            return
        records = [r for chunk in settled for r in chunk]
        if not isinstance(exc, KafkaError):
            log.error("%s %s-%d: unexpected error from the producer", self.flow,
                      self.source_topic, self.partition, exc_info=exc)
        delay = self._backoff.delay(self._attempt)
        self._attempt += 1
        self._retry_at = now + delay
        if self.target_end is not None:
            self.unverified = records
            self._unverified_sizes = [len(chunk) for chunk in settled]
            self.error = (f"{len(records)} records from offset {records[0].offset} not "
                          f"acknowledged ({exc!r}); checking the target in {delay:.1f}s "
                          "before sending them again")
        else:
            self._forced.extendleft(reversed(settled))
            self.error = (f"retrying {len(records)} records from offset {records[0].offset} "
                          f"in {delay:.1f}s: {exc!r}")
        log.warning("%s %s-%d: %s", self.flow, self.source_topic, self.partition, self.error)

    def rolled_back(self, exc: BaseException, now: float) -> None:
        """The transaction carrying the batch in flight was aborted (or never committed):
        read_committed readers never see its copies and progress did not move, so the
        same records are sent again, in a new transaction, after a backoff -- unchecked,
        because the aborted copies on the target do not count."""
        if self.state is not PumpState.RUNNING:
            self._in_flight.clear()
            return
        self._unprepare()
        settled = self._settled_records()
        if settled is None:
            return
        records = [r for chunk in settled for r in chunk]
        self._forced.appendleft(records)
        delay = self._backoff.delay(self._attempt)
        self._attempt += 1
        self._retry_at = now + delay
        self.error = (f"transaction aborted; retrying {len(records)} records from offset "
                      f"{records[0].offset} in {delay:.1f}s: {exc!r}")
        log.warning("%s %s-%d: %s", self.flow, self.source_topic, self.partition, self.error)

    def check_due(self, now: float) -> bool:
        return (self.state is PumpState.RUNNING and self.unverified is not None
                and now >= self._retry_at)

    def checked(self, landed: Landed | None, end: int, now: float) -> Delivered | None:
        """Settle `unverified` with what the target holds after `target_end` (up to
        `end`); the records found count as delivered (returned), the rest is sent again.
        `landed` None: the target holds something else; everything is sent again."""
        records = self.unverified
        assert records is not None, "checked() without unverified records"
        self.unverified = None
        self._unreadable = 0
        count = landed.count if landed is not None else 0
        if count < len(records):
            self._forced.extendleft(reversed(_rechunk(records, self._unverified_sizes, count)))
        if landed is None:
            log.warning("%s %s-%d: the target holds records this partition did not write "
                        "after offset %s; re-sending %d records unchecked", self.flow,
                        self.source_topic, self.partition, self.target_end, len(records))
            self.target_end = None
            return None
        if landed.duplicates:
            log.warning("%s %s-%d: the target holds %d records twice (the client retried a "
                        "produce the broker had accepted)", self.flow, self.source_topic,
                        self.partition, landed.duplicates)
        if not count:
            self.target_end = end
            return None
        assert landed.base is not None
        self._in_flight.appendleft((Shipment(records=records[:count]), time.time_ns()))
        self.target_end = None  # the copies found decide, not the end known before
        delivered = self.acknowledged(landed.base)
        self.target_end = end
        self._retry_at = now
        return delivered

    def check_failed(self, reason: str, now: float, *, answered: bool = False) -> None:
        """The target could not be read: try again after a backoff, sending nothing. A
        target that answers but cannot serve the range (`answered`) is given
        `MAX_UNREADABLE_CHECKS` tries; then the records are sent again unchecked, loudly."""
        self._unreadable = self._unreadable + 1 if answered else 0
        if self._unreadable >= MAX_UNREADABLE_CHECKS and self.unverified is not None:
            records, self.unverified = self.unverified, None
            self._forced.extendleft(reversed(_rechunk(records, self._unverified_sizes, 0)))
            self.target_end = None
            self._unreadable = 0
            self.error = (f"cannot tell whether {len(records)} records from offset "
                          f"{records[0].offset} reached the target ({reason}); sent again, "
                          "they may be on the target twice")
            log.warning("%s %s-%d: %s", self.flow, self.source_topic, self.partition,
                        self.error)
            return
        delay = self._backoff.delay(self._attempt)
        self._attempt += 1
        self._retry_at = now + delay
        self.error = f"cannot check the target ({reason}); trying again in {delay:.1f}s"
        log.warning("%s %s-%d: %s", self.flow, self.source_topic, self.partition, self.error)

    def _where(self, offset: int, what: str) -> str:
        return rejected_record(what, self.flow, self.source_topic, self.partition, offset,
                               self.target_topic)
