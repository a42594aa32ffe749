"""The control log on the home cluster: replayed at start, tailed, appended to by the leader.

An append is confirmed by reading it back: the writer waits until its own record has
been applied to its state and returns the outcome (`Outcome.STALE` means the writer was
deposed before the record landed, so the record changed nothing anywhere).

The log can go backwards under a reader's feet: the home cluster restarted empty, the
topic was deleted and recreated, or restored from an older backup. Offsets then repeat,
the log ends before what was already applied, or the topic is not there at all.
Carrying on from the old state would make every controller claim an epoch the new log
does not know and lose it, forever.
So a reader that sees the log go backwards says so at ERROR, forgets its state and
replays the log as it is now: a log that holds no seeded configuration any more (empty,
or only a stray claim) is re-seeded from the properties file by the next leader, which
says so; a restored one continues from its own state.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiokafka import AIOKafkaProducer

from mirrorline.core.bad_records import BadRecords
from mirrorline.core.control import ControlState, Outcome
from mirrorline.core.errors import one_line
from mirrorline.kafka.admin import ClusterAdmin, TopicSpec
from mirrorline.kafka.reader import TopicReader
from mirrorline.v1 import control_pb2

log = logging.getLogger(__name__)

CONTROL_TOPIC = "mirrorline.control.internal"

#: How often, at most, a reader that reads nothing new checks that the topic still exists.
_EXISTS_EVERY_S = 2.0

#: How long a fetch of the control log's tail waits for a record before the broker answers
#: empty. Every service tails the control log, and idle it is written about never: at the
#: tails' 500 ms (`kafka.reader.TAIL_WAIT_MS`) each service fetched it twice a second for
#: nothing. A record is answered as it lands (Apache Kafka answers a waiting fetch at
#: once; Tansu within about 0.2 s at this wait), so a change reaches every service as
#: soon as before. A fetch.max.wait.ms set in the file wins.
TAIL_WAIT_MS = 2000

#: Called after every applied record: (offset, record, outcome).
Listener = Callable[[int, control_pb2.ControlRecord, Outcome], None]


class ControlLog:
    def __init__(self, *, consumer_kwargs: Mapping[str, Any],
                 producer_kwargs: Mapping[str, Any] | None = None,
                 topic: str = CONTROL_TOPIC,
                 ensure_topic: Callable[[], Awaitable[None]] | None = None) -> None:
        self.topic = topic
        self.state = ControlState()
        self._consumer_kwargs = dict(consumer_kwargs)
        self._reader = TopicReader(self._consumer_kwargs, topic, tail_wait_ms=TAIL_WAIT_MS)
        self._producer = (AIOKafkaProducer(**dict(producer_kwargs, acks="all"))
                          if producer_kwargs is not None else None)
        self._outcomes: OrderedDict[int, Outcome] = OrderedDict()
        #: What was applied at each recent offset (a digest of the record's bytes).
        self._digests: OrderedDict[int, bytes] = OrderedDict()
        self._applied = asyncio.Condition()
        self._listeners: list[Listener] = []
        self._task: asyncio.Task[None] | None = None
        self._ensure_topic = ensure_topic
        self.bad_records = BadRecords(f"control log reader ({topic})")
        #: Why the log cannot be trusted right now (it went backwards); None when fine.
        self.regressed: str | None = None
        self._suspect: str | None = None
        #: Why following the log stopped for good (health says NOT_SERVING); None while
        #: it is followed.
        self.failed: str | None = None
        self._checked_at = float("-inf")

    @property
    def undecodable(self) -> int:
        return self.bad_records.count

    @staticmethod
    async def ensure_topic(admin: ClusterAdmin, replication_factor: int,
                           topic: str = CONTROL_TOPIC) -> None:
        # An event log: never compacted, never expired.
        await admin.ensure_topic(TopicSpec(topic, 1, replication_factor,
                                           {"cleanup.policy": "delete", "retention.ms": "-1"}))

    def listen(self, listener: Listener) -> None:
        self._listeners.append(listener)

    async def start(self, *, wait_for_topic: float = 60.0) -> None:
        """Replay the whole log, then keep following it."""
        deadline = time.monotonic() + wait_for_topic
        while True:
            try:
                await self._reader.start(partitions=None)
                break
            except LookupError:
                await self._reader.stop()
                if time.monotonic() > deadline:
                    raise
                self._reader = TopicReader(self._consumer_kwargs, self.topic,
                                       tail_wait_ms=TAIL_WAIT_MS)
                await asyncio.sleep(1.0)
        for record in await self._reader.read_to_end():
            self._apply(record.offset, record.value)
        if self._producer is not None:
            await self._producer.start()
        self._task = asyncio.create_task(self._tail(), name="control log")
        self._task.add_done_callback(self._tail_ended)
        log.info("control log %s replayed up to offset %d (epoch %d, %d flows)", self.topic,
                 self.state.applied_offset, self.state.epoch, len(self.state.flows))

    def _tail_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        self.failed = ("following the control log stopped"
                       + (f": {one_line(exc)}" if exc is not None else ""))
        log.error("%s", self.failed)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._reader.stop()
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._producer.stop(), 1.0)

    async def append(self, record: control_pb2.ControlRecord, timeout: float = 30.0
                     ) -> tuple[int, Outcome]:
        """Append `record` and wait until it has been applied; returns its offset and fate."""
        if self._producer is None:
            raise RuntimeError("this control log reader cannot append")
        record.timestamp_ms = record.timestamp_ms or int(time.time() * 1000)
        payload = record.SerializeToString()
        metadata = await asyncio.wait_for(
            self._producer.send_and_wait(self.topic, payload, partition=0), timeout)
        offset: int = metadata.offset
        # The reader may apply the record before the acknowledgement is handled: then
        # what was applied at that offset is this very record. Anything else there means
        # the log was replaced under us.
        if offset <= self.state.applied_offset \
                and self._digests.get(offset) != _digest(payload):
            self._suspect = (f"an append landed at offset {offset}, but offset "
                             f"{self.state.applied_offset} was already applied")
            raise RuntimeError(f"the control log {self.topic} went backwards; not trusting "
                               "this append")
        await self.wait_applied(offset, timeout)
        return offset, self._outcomes.get(offset, Outcome.INVALID)

    async def wait_applied(self, offset: int, timeout: float = 30.0) -> None:
        async with self._applied:
            await asyncio.wait_for(
                self._applied.wait_for(lambda: self.state.applied_offset >= offset), timeout)

    async def _tail(self) -> None:
        while True:
            try:
                if self._suspect is not None or self.regressed is not None:
                    await self._rebuild(self._suspect or self.regressed or "")
                    continue
                records = await self._reader.poll(timeout_ms=500)
                if not records:
                    end = self._reader.end_offsets().get(0)
                    if end is not None and end <= self.state.applied_offset:
                        self._suspect = (f"it ends at offset {end}, but offset "
                                         f"{self.state.applied_offset} was already applied")
                    elif self.state.applied_offset >= 0 and await self._vanished():
                        self._suspect = (f"the topic no longer exists, but offset "
                                         f"{self.state.applied_offset} was already applied")
                    continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("reading the control log failed (%r); retrying", exc)
                await asyncio.sleep(1.0)
                continue
            for record in records:
                if record.offset <= self.state.applied_offset:
                    self._suspect = (f"offset {record.offset} was read again after offset "
                                     f"{self.state.applied_offset} had been applied")
                    break
                self._apply(record.offset, record.value)
            async with self._applied:
                self._applied.notify_all()

    async def _vanished(self) -> bool:
        """The topic is gone from the home cluster (checked at most every few seconds).

        A cluster that came back empty (Apache Kafka, say, restarted on fresh storage)
        has no control topic at all until someone creates it: fetches for it fail, the
        reader keeps the high watermark of the old topic, and the end never looks behind
        what was applied. Nobody would recreate the topic either -- a claim waits for it
        and times out -- so the gap must be noticed here. An unreachable cluster says
        nothing either way."""
        now = time.monotonic()
        if now - self._checked_at < _EXISTS_EVERY_S:
            return False
        self._checked_at = now
        try:
            return not await self._reader.exists()
        except Exception as exc:
            log.debug("could not check that %s exists: %s", self.topic, one_line(exc))
            return False

    async def _rebuild(self, why: str) -> None:
        """Forget the state and replay the log as it is now (see the module docstring)."""
        if self.regressed is None:
            self.regressed = f"the control log {self.topic} went backwards: {why}"
            log.error("%s -- the topic was truncated, recreated or restored from an older "
                      "backup (was the home cluster restarted empty?); rebuilding the state "
                      "from what the log holds now", self.regressed)
        self._suspect = None
        before = self.state
        with contextlib.suppress(Exception):
            await self._reader.stop()
        if self._ensure_topic is not None:
            await self._ensure_topic()
        self._reader = TopicReader(self._consumer_kwargs, self.topic,
                                  tail_wait_ms=TAIL_WAIT_MS)
        try:
            await self._reader.start(partitions=None)
        except LookupError:
            await asyncio.sleep(1.0)  # the topic is gone; its writer recreates it
            return
        self.state = ControlState()
        self._outcomes.clear()
        self._digests.clear()
        for record in await self._reader.read_to_end():
            self._apply(record.offset, record.value)
        if not self.state.seeded:
            log.error("control log %s holds no configuration now (%d records, none of them "
                      "a seeded configuration): the next leader re-seeds it from the "
                      "properties file; flows created or changed through the Admin API since "
                      "the file was first seeded are lost and must be re-created", self.topic,
                      self.state.applied_offset + 1)
        else:
            log.error("control log %s rebuilt from its %d records: epoch %d, %d flows "
                      "(before: epoch %d, %d flows); anything written after this copy was "
                      "taken is lost", self.topic, self.state.applied_offset + 1,
                      self.state.epoch, len(self.state.flows), before.epoch, len(before.flows))
        self.regressed = None
        async with self._applied:
            self._applied.notify_all()

    def _apply(self, offset: int, value: bytes | None) -> None:
        def parse() -> control_pb2.ControlRecord:
            parsed = control_pb2.ControlRecord()
            parsed.ParseFromString(value or b"")
            return parsed

        record = self.bad_records.decode(self.topic, 0, offset, parse)
        if record is None:
            self.state.applied_offset = offset
            return
        try:
            outcome = self.state.apply(offset, record)
        except Exception as exc:  # a record that decodes but cannot be folded in
            self.state.applied_offset = offset
            self.bad_records.skip(self.topic, 0, offset, one_line(exc))
            outcome = Outcome.INVALID
        self._outcomes[offset] = outcome
        self._digests[offset] = _digest(value or b"")
        while len(self._outcomes) > 10_000:
            self._outcomes.popitem(last=False)
        while len(self._digests) > 10_000:
            self._digests.popitem(last=False)
        if outcome is not Outcome.APPLIED:
            log.info("control log offset %d (%s from %s, epoch %d) not applied: %s", offset,
                     record.WhichOneof("event"), record.controller_id, record.epoch,
                     outcome.value)
        for listener in self._listeners:
            try:
                listener(offset, record, outcome)
            except Exception as exc:  # a listener's failure is its own, not the reader's
                log.error("control log offset %d: a listener failed: %s", offset,
                          one_line(exc))
                log.debug("the listener's failure", exc_info=True)


def _digest(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=16).digest()
