"""The source's log ends, as fetch responses report them.

Kafka's ListOffsets(latest) would be the direct question, but some Kafka-compatible
brokers answer it wrongly (see the test broker's notes), while every fetch response
carries the partition's high watermark. So the driver's consumer fetches each asked
partition from its last known end and reads the high watermark librdkafka caches from the
responses.

Asked at every micro-batch, the probe answers as soon as each partition has been in a
fetch response that arrived after the question, and no later than `PROBE_S`. Two events
show that for a partition: one of its records (the response that carried it carried the
high watermark too), or its end-of-partition event, which librdkafka emits when a fetch
finds nothing beyond the position it asked for, i.e. when the response's high watermark
is that position (the consumer reads uncommitted, so that is the log end and not the last
stable offset). Each assignment makes librdkafka fetch afresh under a new version and drop
whatever older fetches return, so neither event can come from a response to an earlier
question. An idle partition thus costs one fetch the broker holds for `FETCH_WAIT_MS`,
one with new records a round trip. (librdkafka's statistics, emitted on a timer, give a
partition's cached watermarks and a broker's response counts, but not when a partition
was last in a response, so they cannot tell the same.)
"""

from __future__ import annotations

import time
from typing import Any

#: The longest `ends` waits for fresh fetch responses; a partition that has none by then
#: (its leader unreachable, or a position past the log end on a broker that answers such a
#: fetch with an empty response instead of OFFSET_OUT_OF_RANGE) keeps its last answer.
PROBE_S = 0.25
#: How long the broker may hold a fetch that finds nothing new: the time an idle partition's
#: answer takes. Low, since the consumer only fetches while `ends` runs.
FETCH_WAIT_MS = 10
#: Records taken off the consumer's queue per call while waiting; they are dropped.
_DRAIN = 10_000

TopicPartitionKey = tuple[str, int]


class EndProbe:
    """One consumer on one cluster; `ends` answers for any set of its partitions."""

    def __init__(self, kafka: dict[str, str]) -> None:
        self._kafka = kafka
        self._consumer: Any = None
        self._high: dict[TopicPartitionKey, int] = {}

    def ends(self, positions: dict[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """The log end of each partition, as fetch responses since the call report it.

        A partition is fetched from its last known end (known ends only grow, and fetching
        there costs only the records added since), or from its position in `positions` the
        first time. Records received are dropped: the read tasks read them. A partition
        without a fresh response within `PROBE_S` keeps the newest end librdkafka cached;
        one never answered is missing from the result. Ends never go backwards.
        """
        from confluent_kafka import TopicPartition

        if not positions:
            return {}
        deadline = time.monotonic() + PROBE_S
        consumer = self._open()
        consumer.assign([TopicPartition(t, p, self._high.get((t, p), o))
                         for (t, p), o in positions.items()])
        try:
            self._await_responses(consumer, set(positions), deadline)
            for (t, p) in positions:
                _, high = consumer.get_watermark_offsets(TopicPartition(t, p), cached=True)
                if high >= 0:
                    self._high[(t, p)] = max(high, self._high.get((t, p), high))
        finally:
            # Nothing is fetched between calls: no load on the brokers while the query
            # is busy, and no fetch the broker still holds when the next call starts.
            consumer.unassign()
        return {k: v for k, v in self._high.items() if k in positions}

    @staticmethod
    def _await_responses(consumer: Any, pending: set[TopicPartitionKey],
                         deadline: float) -> None:
        """Consume until every pending partition has had a record, an end-of-partition
        event or an error of its own (no fresh end will come for it then), or until the
        deadline."""
        while pending and (left := deadline - time.monotonic()) > 0:
            first = consumer.poll(left)
            if first is None:
                return
            for message in [first, *consumer.consume(num_messages=_DRAIN, timeout=0)]:
                if message.topic() is not None:  # errors of the client as a whole have none
                    pending.discard((message.topic(), message.partition()))

    def _open(self) -> Any:
        from confluent_kafka import Consumer

        if self._consumer is None:
            self._consumer = Consumer({
                **self._kafka, "group.id": "mirrorline-spark-probe",
                "enable.auto.commit": False, "enable.partition.eof": True,
                # The end-of-partition event then marks the high watermark (with
                # read_committed it would mark the last stable offset instead).
                "isolation.level": "read_uncommitted",
                "fetch.wait.max.ms": FETCH_WAIT_MS, "max.partition.fetch.bytes": 1024,
                # A position out of range (Apache Kafka's answer past the end or before
                # the start) restarts fetching at the log start, not ListOffsets(latest).
                "auto.offset.reset": "earliest",
            })
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
