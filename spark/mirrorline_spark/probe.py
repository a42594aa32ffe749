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
is that position. Each assignment makes librdkafka fetch afresh under a new version and drop
whatever older fetches return, so neither event can come from a response to an earlier
question. An idle partition thus costs one fetch the broker holds for `FETCH_WAIT_MS`,
one with new records a round trip. (librdkafka's statistics, emitted on a timer, give a
partition's cached watermarks and a broker's response counts, but not when a partition
was last in a response, so they cannot tell the same.)

The end is where the read tasks can read to, so the probe reads transactions as they do
(the feed's `isolation.level`). Uncommitted, it is the high watermark. Committed, it is
the last stable offset: the records of a transaction still open are not readable yet, and
a micro-batch planned past them would wait for its commit. librdkafka caches the high
watermark either way, so then the end is where the end-of-partition event fired (a
committed fetch ends at the last stable offset) or just past the last record received.
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
        #: Reads transactions committed only (librdkafka's default), as the tasks do.
        self._committed = kafka.get("isolation.level", "read_committed") == "read_committed"
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
        fetch_from = {k: self._high.get(k, o) for k, o in positions.items()}
        consumer.assign([TopicPartition(t, p, o) for (t, p), o in fetch_from.items()])
        try:
            seen = self._await_responses(consumer, set(positions), deadline)
            for (t, p) in positions:
                _, high = consumer.get_watermark_offsets(TopicPartition(t, p), cached=True)
                if self._committed and (t, p) in seen:
                    high = seen[(t, p)]
                elif self._committed and not 0 <= high < fetch_from[(t, p)]:
                    # No event: the cached high watermark may lie past the last stable
                    # offset. Only one below where the probe fetched from is taken (a
                    # source that lost records): an end below the position plans nothing.
                    high = -1
                if high >= 0:
                    self._high[(t, p)] = max(high, self._high.get((t, p), high))
        finally:
            # Nothing is fetched between calls: no load on the brokers while the query
            # is busy, and no fetch the broker still holds when the next call starts.
            consumer.unassign()
        return {k: v for k, v in self._high.items() if k in positions}

    @staticmethod
    def _await_responses(consumer: Any, pending: set[TopicPartitionKey],
                         deadline: float) -> dict[TopicPartitionKey, int]:
        """Consume until every pending partition has had a record, an end-of-partition
        event or an error of its own (no fresh end will come for it then), or until the
        deadline. Returns, per partition, the furthest offset readable as seen: past its
        last record received, or where its end-of-partition event fired."""
        from confluent_kafka import KafkaError

        seen: dict[TopicPartitionKey, int] = {}
        while pending and (left := deadline - time.monotonic()) > 0:
            first = consumer.poll(left)
            if first is None:
                break
            for message in [first, *consumer.consume(num_messages=_DRAIN, timeout=0)]:
                if message.topic() is None:  # errors of the client as a whole have none
                    continue
                key = (message.topic(), message.partition())
                pending.discard(key)
                error = message.error()
                if error is None:
                    seen[key] = max(seen.get(key, 0), message.offset() + 1)
                elif error.code() == KafkaError._PARTITION_EOF:
                    seen[key] = max(seen.get(key, 0), message.offset())
        return seen

    def _open(self) -> Any:
        from confluent_kafka import Consumer

        if self._consumer is None:
            self._consumer = Consumer({
                **self._kafka, "group.id": "mirrorline-spark-probe",
                "enable.auto.commit": False, "enable.partition.eof": True,
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
