"""Bounded reads of several partitions at once: from a start offset, up to a limit.

The tail matcher needs "the target from offset T to its end" and "the source from offset S,
N records". "The end" is the high watermark carried by fetch responses, never a
ListOffsets(latest) answer (some Kafka-compatible brokers get that wrong). Each range
stops at its end, at its record limit, or -- reported per partition, not raised -- when
its start no longer exists (OFFSET_OUT_OF_RANGE), so one bad partition never hides the
answers for the others. A range may also start at `FIRST`, the partition's first readable
record (its log start may lie beyond 0 after retention or a deletion).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import OffsetOutOfRangeError

from mirrorline.kafka.records import Record
from mirrorline.kafka.watermarks import high_watermarks

#: A range start meaning "the partition's first readable record, wherever its log starts".
FIRST = -2


@dataclass
class Range:
    """Records of one partition from `start`: up to `limit` records or the end."""

    start: int
    limit: int
    records: list[Record] = field(default_factory=list)
    #: The high watermark seen when the read finished (None: never learnt).
    end: int | None = None
    #: Why the range could not be read ("" when it was).
    error: str = ""
    #: More records exist beyond `limit`.
    truncated: bool = False
    #: The partition does not exist (its topic is missing or has fewer partitions).
    missing: bool = False

    @property
    def position(self) -> int:
        return self.records[-1].offset + 1 if self.records else self.start


async def read_ranges(consumer_kwargs: Mapping[str, Any], ranges: Mapping[TopicPartition, Range],
                      *, timeout: float = 30.0) -> None:
    """Fill every range in place (bounded by `timeout` overall)."""
    if not ranges:
        return
    deadline = time.monotonic() + timeout
    # Learn each end first: some brokers never answer a fetch beyond the end (they wait
    # for records instead of saying OFFSET_OUT_OF_RANGE), and a missing partition must
    # not be waited for either.
    ends = await high_watermarks(consumer_kwargs, {tp.topic for tp in ranges},
                                 timeout=timeout)
    open_: dict[TopicPartition, Range] = {}
    for tp, r in ranges.items():
        end = ends.get(tp)
        r.end = end
        if end is None:
            r.error = f"partition {tp.partition} of {tp.topic!r} not found"
            r.missing = True
        elif r.start == FIRST:
            if end > 0 and r.limit > 0:
                open_[tp] = r
        elif r.start > end:
            r.error = f"offset {r.start} is beyond the end of the partition ({end})"
        elif r.start < end and r.limit > 0:
            open_[tp] = r
    if not open_:
        return
    kwargs = dict(consumer_kwargs)
    kwargs.pop("group_id", None)
    kwargs.update(enable_auto_commit=False, auto_offset_reset="none", fetch_max_wait_ms=100)
    consumer = AIOKafkaConsumer(**kwargs)
    try:
        await consumer.start()
        await _read(consumer, open_, deadline)
    finally:
        await consumer.stop()


async def _read(consumer: AIOKafkaConsumer, open_: dict[TopicPartition, Range],
                deadline: float) -> None:
    async def reassign() -> None:
        consumer.assign(list(open_))
        for tp, r in open_.items():
            if r.position == FIRST:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, r.position)

    await reassign()
    while open_:
        if time.monotonic() > deadline:
            for r in open_.values():
                r.error = "reading took too long"
            return
        try:
            batches = await consumer.getmany(timeout_ms=200)
        except OffsetOutOfRangeError as exc:
            gone = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
            for tp, offset in gone.items():
                if tp in open_:
                    open_.pop(tp).error = f"offset {offset} no longer exists"
            if not gone:  # cannot tell which: fail them all rather than loop
                for r in open_.values():
                    r.error = f"offset out of range: {exc!r}"
                return
            await reassign()
            continue
        for tp, records in batches.items():
            if tp not in open_:
                continue
            wanted = open_[tp]
            room = wanted.limit - len(wanted.records)
            wanted.records.extend(records[:room])
            if len(records) > room:
                wanted.truncated = True
        for tp in list(open_):
            r = open_[tp]
            high = consumer.highwater(tp)
            if high is not None:
                r.end = high
            # The consumer's position, not the last record's: it moves past offsets that
            # hold no record (transaction markers) too.
            at_end = high is not None and await consumer.position(tp) >= high
            if r.truncated or len(r.records) >= r.limit or at_end:
                if len(r.records) >= r.limit and not at_end:
                    r.truncated = True
                del open_[tp]
                consumer.pause(tp)


async def read_or_note(kwargs: Mapping[str, Any], ranges: Mapping[TopicPartition, Range],
                       timeout: float, side: str) -> None:
    """`read_ranges`, except that a cluster that cannot be read marks every range with the
    reason instead of raising: a tail that cannot be read is a tail that cannot be
    matched. `side` ("source", "target") names the cluster in that reason."""
    try:
        await read_ranges(kwargs, ranges, timeout=timeout)
    except Exception as exc:  # unreachable cluster: every range unread, not fatal
        for r in ranges.values():
            r.error = r.error or f"cannot read the {side}: {exc!r}"
