"""The control log on the home cluster: replayed at start, tailed, appended to by the leader.

An append is confirmed by reading it back: the writer waits until its own record has
been applied to its state and returns the outcome (`Outcome.STALE` means the writer was
deposed before the record landed, so the record changed nothing anywhere).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from aiokafka import AIOKafkaProducer
from google.protobuf.message import DecodeError

from mirrorline.core.control import ControlState, Outcome
from mirrorline.kafka.admin import ClusterAdmin, TopicSpec
from mirrorline.kafka.reader import TopicReader
from mirrorline.v1 import control_pb2

log = logging.getLogger(__name__)

CONTROL_TOPIC = "mirrorline.control.internal"

#: Called after every applied record: (offset, record, outcome).
Listener = Callable[[int, control_pb2.ControlRecord, Outcome], None]


class ControlLog:
    def __init__(self, *, consumer_kwargs: Mapping[str, Any],
                 producer_kwargs: Mapping[str, Any] | None = None,
                 topic: str = CONTROL_TOPIC) -> None:
        self.topic = topic
        self.state = ControlState()
        self._consumer_kwargs = dict(consumer_kwargs)
        self._reader = TopicReader(self._consumer_kwargs, topic)
        self._producer = (AIOKafkaProducer(**dict(producer_kwargs, acks="all"))
                          if producer_kwargs is not None else None)
        self._outcomes: OrderedDict[int, Outcome] = OrderedDict()
        self._applied = asyncio.Condition()
        self._listeners: list[Listener] = []
        self._task: asyncio.Task[None] | None = None
        self.undecodable = 0

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
                self._reader = TopicReader(self._consumer_kwargs, self.topic)
                await asyncio.sleep(1.0)
        for record in await self._reader.read_to_end():
            self._apply(record.offset, record.value)
        if self._producer is not None:
            await self._producer.start()
        self._task = asyncio.create_task(self._tail(), name="control log")
        log.info("control log %s replayed up to offset %d (epoch %d, %d flows)", self.topic,
                 self.state.applied_offset, self.state.epoch, len(self.state.flows))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._reader.stop()
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await self._producer.stop()

    async def append(self, record: control_pb2.ControlRecord, timeout: float = 30.0
                     ) -> tuple[int, Outcome]:
        """Append `record` and wait until it has been applied; returns its offset and fate."""
        if self._producer is None:
            raise RuntimeError("this control log reader cannot append")
        record.timestamp_ms = record.timestamp_ms or int(time.time() * 1000)
        metadata = await asyncio.wait_for(
            self._producer.send_and_wait(self.topic, record.SerializeToString(), partition=0),
            timeout)
        offset: int = metadata.offset
        await self.wait_applied(offset, timeout)
        return offset, self._outcomes.get(offset, Outcome.INVALID)

    async def wait_applied(self, offset: int, timeout: float = 30.0) -> None:
        async with self._applied:
            await asyncio.wait_for(
                self._applied.wait_for(lambda: self.state.applied_offset >= offset), timeout)

    async def _tail(self) -> None:
        while True:
            try:
                records = await self._reader.poll(timeout_ms=500)
            except Exception as exc:
                log.warning("reading the control log failed (%r); retrying", exc)
                await asyncio.sleep(1.0)
                continue
            if not records:
                continue
            for record in records:
                self._apply(record.offset, record.value)
            async with self._applied:
                self._applied.notify_all()

    def _apply(self, offset: int, value: bytes | None) -> None:
        record = control_pb2.ControlRecord()
        try:
            record.ParseFromString(value or b"")
        except DecodeError:
            self.undecodable += 1
            log.warning("control log offset %d does not decode; skipped", offset)
            self.state.applied_offset = offset
            return
        outcome = self.state.apply(offset, record)
        self._outcomes[offset] = outcome
        while len(self._outcomes) > 10_000:
            self._outcomes.popitem(last=False)
        if outcome is not Outcome.APPLIED:
            log.info("control log offset %d (%s from %s, epoch %d) not applied: %s", offset,
                     record.WhichOneof("event"), record.controller_id, record.epoch,
                     outcome.value)
        for listener in self._listeners:
            listener(offset, record, outcome)
