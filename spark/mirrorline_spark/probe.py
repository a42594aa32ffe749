"""The source's log ends, as fetch responses report them.

Kafka's ListOffsets(latest) would be the direct question, but some Kafka-compatible
brokers answer it wrongly (see the test broker's notes), while every fetch response
carries the partition's high watermark. So the driver keeps one consumer positioned at
the last known ends and reads the high watermarks librdkafka caches from its fetches.
"""

from __future__ import annotations

import time
from typing import Any

#: How long the driver listens for fetch responses when asked for the latest offsets.
PROBE_S = 0.25


class EndProbe:
    """One consumer on one cluster; `ends` answers for any set of its partitions."""

    def __init__(self, kafka: dict[str, str]) -> None:
        self._kafka = kafka
        self._consumer: Any = None
        self._high: dict[tuple[str, int], int] = {}

    def ends(self, positions: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """The log end of each partition, as the last fetch responses report it.

        The consumer, positioned at the last known end, fetches for `PROBE_S`; each fetch
        response carries the partition's high watermark, which librdkafka caches. Records
        it happens to receive are dropped (the read tasks read them).
        """
        from confluent_kafka import Consumer, TopicPartition

        if self._consumer is None:
            self._consumer = Consumer({**self._kafka, "group.id": "mirrorline-spark-probe",
                                       "enable.auto.commit": False, "fetch.wait.max.ms": 20,
                                       "max.partition.fetch.bytes": 1024,
                                       "enable.partition.eof": False})
        tps = [TopicPartition(t, p, max(o, self._high.get((t, p), o)))
               for (t, p), o in positions.items()]
        self._consumer.assign(tps)
        deadline = time.monotonic() + PROBE_S
        while (left := deadline - time.monotonic()) > 0:
            self._consumer.consume(num_messages=1000, timeout=left)
        for (t, p) in positions:
            _, high = self._consumer.get_watermark_offsets(TopicPartition(t, p), cached=True)
            if high >= 0:
                self._high[(t, p)] = max(high, self._high.get((t, p), high))
        return {k: v for k, v in self._high.items() if k in positions}

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
