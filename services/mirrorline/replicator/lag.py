"""How far behind the source each partition a flow owns is, whether it is fetched or not.

Every `LAG_INTERVAL_S` (and at once when partitions are added) the flow asks the source
for the log ends of all its partitions (ListOffsets, one request per source broker) and,
for those behind whose oldest unmirrored record's timestamp is not known yet, reads that
record (`kafka/oldest.OldestRecords`: one small fetch per lagging partition, and only
when its next offset or the end moved; the fetch's high watermark counts as an end too).
What the flow's own consumer learnt from fetch responses counts as well, so a running
partition's lag is never older than its last fetch. The
arithmetic and the memory are `core/lag.LagBook`; status, worker heartbeats and the
`record-lag` / `record-lag-ms` metrics all read the same book.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition

from mirrorline.core.lag import Lag, LagBook
from mirrorline.kafka.oldest import OldestRecords
from mirrorline.replicator.pump import PartitionPump

__all__ = ["LAG_INTERVAL_S", "FlowLag"]

log = logging.getLogger(__name__)

#: How often the source's log ends are measured.
LAG_INTERVAL_S = 1.0
#: Bound on one measurement's requests (a source that does not answer).
MEASURE_TIMEOUT_S = 5.0
#: At most this many oldest-record reads per measuring round (the most behind first).
MAX_READS = 256


class FlowLag:
    def __init__(self, name: str, pumps: Mapping[TopicPartition, PartitionPump],
                 consumer: Callable[[], AIOKafkaConsumer | None],
                 highwater: Callable[[TopicPartition], int | None]) -> None:
        """`highwater`: the high watermark the flow's latest fetch answer gave."""
        self.name = name
        self.book: LagBook[TopicPartition] = LagBook()
        self._pumps = pumps
        self._consumer = consumer
        self._highwater = highwater
        self._oldest: OldestRecords | None = None
        self._wake = asyncio.Event()
        self._failing = False

    def open(self, source_consumer_kwargs: Mapping[str, object]) -> None:
        self._oldest = OldestRecords(source_consumer_kwargs)

    async def close(self) -> None:
        oldest, self._oldest = self._oldest, None
        if oldest is not None:
            await oldest.stop()

    def wake(self) -> None:
        """Measure now (partitions were added: show their backlog at once)."""
        self._wake.set()

    def end(self, tp: TopicPartition) -> int | None:
        """The source's log end: measured, or from a newer fetch response."""
        return self.book.end(tp, self._high(tp))

    def lag(self, tp: TopicPartition, pump: PartitionPump, now_ms: float | None = None) -> Lag:
        return self.book.lag(tp, pump.next_offset,
                             time.time() * 1000.0 if now_ms is None else now_ms,
                             self._high(tp))

    def records(self, tp: TopicPartition, pump: PartitionPump) -> int | None:
        """Records behind (the `record-lag` gauge); None while not known."""
        lag = self.lag(tp, pump)
        return None if lag.records < 0 else lag.records

    def millis(self, tp: TopicPartition, pump: PartitionPump) -> float | None:
        """Age of the oldest record not copied (the `record-lag-ms` gauge); None while
        not known."""
        lag = self.lag(tp, pump)
        return None if lag.ms < 0 else lag.ms

    def _high(self, tp: TopicPartition) -> int | None:
        return self._highwater(tp)

    async def run(self, stopping: Callable[[], bool]) -> None:
        while not stopping():
            try:
                await asyncio.wait_for(self.measure(), MEASURE_TIMEOUT_S * 2)
                if self._failing:
                    log.info("%s: source log ends measured again", self.name)
                self._failing = False
            except Exception as exc:  # the last known ends stand; the source is probed
                if not self._failing:  # elsewhere and its failure reported there
                    log.info("%s: cannot measure the source's log ends (%r); lag shows "
                             "the last known ones", self.name, exc)
                self._failing = True
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), LAG_INTERVAL_S)

    async def measure(self) -> None:
        consumer = self._consumer()
        if consumer is None:
            return
        positions = {tp: pump.next_offset for tp, pump in list(self._pumps.items())}
        self.book.retain(positions)
        if not positions:
            return
        ends = await asyncio.wait_for(consumer.end_offsets(list(positions)),
                                      MEASURE_TIMEOUT_S)
        self.book.saw_ends({tp: int(end) for tp, end in ends.items() if tp in self._pumps})
        highs = {tp: high for tp in positions if (high := self._highwater(tp)) is not None}
        wanted = self.book.stamps_wanted(positions, highs, limit=MAX_READS)
        if wanted and self._oldest is not None:
            oldest = await self._oldest.timestamps(wanted)
            self.book.saw_ends({tp: high for tp, high in oldest.high_watermarks.items()
                                if tp in self._pumps})
            for tp, timestamp in oldest.timestamps.items():
                self.book.saw_stamp(tp, wanted[tp], timestamp)
