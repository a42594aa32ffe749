"""MM2's source-side metrics, as OpenTelemetry instruments.

Names and tags follow MM2 (`record-count`, `byte-rate`, `record-age-ms-max`, ... tagged
`source`, `target`, `topic` = remote topic, `partition`) so an MM2 dashboard maps onto
Mirrorline one to one; `record-lag` (records behind the source's log end), `record-lag-ms`
(the age of the oldest record not copied yet) and `record-lost-count` (source records
removed before they could be copied) are Mirrorline's additions. Values are folded in once
per batch, not per record.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from mirrorline.core.stats import SampledStat
from mirrorline.kafka.records import Record

Attributes = dict[str, str | int]
_VALUE = operator.attrgetter("value")


@dataclass
class PartitionMetrics:
    attributes: Attributes
    record_age: SampledStat = field(default_factory=SampledStat)
    latency: SampledStat = field(default_factory=SampledStat)
    records: SampledStat = field(default_factory=SampledStat)
    value_bytes: SampledStat = field(default_factory=SampledStat)
    #: Records behind the source's log end, and the age in ms of the oldest record not
    #: copied yet (None: not known, no sample).
    lag: Callable[[], int | None] = lambda: None
    lag_ms: Callable[[], float | None] = lambda: None


class ReplicationMetrics:
    """The instruments of one replicator process; partitions register themselves."""

    def __init__(self, meter: Meter, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._partitions: dict[tuple[str, str, str, int], PartitionMetrics] = {}
        # MM2's names carry their unit ("-ms", "-rate"); giving OTel units as well would make
        # the Prometheus exporter append them again (record_age_ms_max_milliseconds).
        self._record_count = meter.create_counter(
            "record-count", description="Records acknowledged by the target")
        self._byte_count = meter.create_counter(
            "byte-count", description="Value bytes fetched for replication")
        self._lost_count = meter.create_counter(
            "record-lost-count", description="Source records removed (retention, "
            "DeleteRecords) before they could be copied: a gap on the target")
        gauges: list[tuple[str, str, Callable[[PartitionMetrics, float], float | None]]] = [
            ("record-rate", "records/s acknowledged (2 x 30 s window)",
             lambda m, now: m.records.rate(now, of_count=True)),
            ("byte-rate", "value bytes/s fetched", lambda m, now: m.value_bytes.rate(now)),
            ("record-age-ms", "fetch time - record timestamp, last batch",
             lambda m, now: m.record_age.last),
            ("record-age-ms-min", "", lambda m, now: m.record_age.minimum(now)),
            ("record-age-ms-max", "", lambda m, now: m.record_age.maximum(now)),
            ("record-age-ms-avg", "", lambda m, now: m.record_age.average(now)),
            ("replication-latency-ms", "ack time - record timestamp, last batch",
             lambda m, now: m.latency.last),
            ("replication-latency-ms-min", "", lambda m, now: m.latency.minimum(now)),
            ("replication-latency-ms-max", "", lambda m, now: m.latency.maximum(now)),
            ("replication-latency-ms-avg", "", lambda m, now: m.latency.average(now)),
            ("record-lag", "source log end - next offset to copy",
             lambda m, now: _optional_float(m.lag())),
            ("record-lag-ms", "age of the oldest source record not copied yet (0: caught up)",
             lambda m, now: m.lag_ms()),
        ]
        for name, description, read in gauges:
            meter.create_observable_gauge(name, callbacks=[self._observer(read)],
                                          description=description)

    def _observer(self, read: Callable[[PartitionMetrics, float], float | None]
                  ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            now = self._clock()
            for m in list(self._partitions.values()):
                value = read(m, now)
                if value is not None:
                    yield Observation(value, m.attributes)
        return observe

    def partition(self, source: str, target: str, remote_topic: str,
                  partition: int) -> PartitionMetrics:
        key = (source, target, remote_topic, partition)
        metrics = self._partitions.get(key)
        if metrics is None:
            metrics = PartitionMetrics({"source": source, "target": target,
                                        "topic": remote_topic, "partition": partition})
            self._partitions[key] = metrics
            # The counters' series exist from 0: a dashboard's increase() or rate() then
            # reads 0 for a partition that copied or lost nothing yet, not no data.
            for counter in (self._record_count, self._byte_count, self._lost_count):
                counter.add(0, metrics.attributes)
        return metrics

    def forget(self, source: str, target: str, remote_topic: str, partition: int) -> None:
        self._partitions.pop((source, target, remote_topic, partition), None)

    def lost(self, m: PartitionMetrics, count: int) -> None:
        """Source records the partition skipped because the source no longer had them."""
        if count > 0:
            self._lost_count.add(count, m.attributes)

    def fetched(self, m: PartitionMetrics, records: Sequence[Record]) -> None:
        """At fetch time: record age and value bytes (MM2 measures both at poll)."""
        now_ms = self._clock() * 1000.0
        stamps = [r.timestamp for r in records]
        nbytes = sum(map(len, filter(None, map(_VALUE, records))))
        m.record_age.record(now_ms / 1000.0, count=len(stamps),
                            total=now_ms * len(stamps) - sum(stamps),
                            minimum=now_ms - max(stamps), maximum=now_ms - min(stamps),
                            last=now_ms - stamps[-1])
        m.value_bytes.record(now_ms / 1000.0, count=len(stamps), total=nbytes,
                             minimum=0, maximum=0, last=0)
        self._byte_count.add(nbytes, m.attributes)

    def fetched_batch(self, m: PartitionMetrics, count: int, nbytes: int, min_ts: int,
                      max_ts: int) -> None:
        """At fetch time, a source batch the batch path copies without decoding: its header
        gives the record count and first and newest timestamps (the mean age is taken
        between them), its size the bytes (the records section as sent, compressed where
        the source compressed it)."""
        now_ms = self._clock() * 1000.0
        m.record_age.record(now_ms / 1000.0, count=count,
                            total=(now_ms - (min_ts + max_ts) / 2.0) * count,
                            minimum=now_ms - max_ts, maximum=now_ms - min_ts,
                            last=now_ms - max_ts)
        m.value_bytes.record(now_ms / 1000.0, count=count, total=nbytes, minimum=0,
                             maximum=0, last=0)
        self._byte_count.add(nbytes, m.attributes)

    def acknowledged_batch(self, m: PartitionMetrics, count: int, min_ts: int,
                           max_ts: int) -> None:
        """After the target's ack of a source batch copied as it is: count and end-to-end
        latency, from its header's timestamps."""
        now_ms = self._clock() * 1000.0
        m.latency.record(now_ms / 1000.0, count=count,
                         total=(now_ms - (min_ts + max_ts) / 2.0) * count,
                         minimum=now_ms - max_ts, maximum=now_ms - min_ts,
                         last=now_ms - max_ts)
        m.records.record(now_ms / 1000.0, count=count, total=count, minimum=0, maximum=0,
                         last=0)
        self._record_count.add(count, m.attributes)

    def acknowledged_summary(self, m: PartitionMetrics, count: int, value_bytes: int,
                             min_ts: int, max_ts: int, last_ts: int, *,
                             fetched_ms: float = -1.0) -> None:
        """A run acknowledged by a path that sees only its summary (the Spark executor):
        count, value bytes, end-to-end latency and -- given when the records were read
        (`fetched_ms`) -- record age, under the same names."""
        if count <= 0:
            return
        now_ms = self._clock() * 1000.0
        mean_ts = (min_ts + max_ts) / 2.0
        if fetched_ms >= 0:
            m.record_age.record(now_ms / 1000.0, count=count,
                                total=(fetched_ms - mean_ts) * count,
                                minimum=fetched_ms - max_ts, maximum=fetched_ms - min_ts,
                                last=fetched_ms - last_ts)
        m.latency.record(now_ms / 1000.0, count=count, total=(now_ms - mean_ts) * count,
                         minimum=now_ms - max_ts, maximum=now_ms - min_ts,
                         last=now_ms - last_ts)
        m.records.record(now_ms / 1000.0, count=count, total=count, minimum=0, maximum=0,
                         last=0)
        m.value_bytes.record(now_ms / 1000.0, count=count, total=value_bytes, minimum=0,
                             maximum=0, last=0)
        self._record_count.add(count, m.attributes)
        self._byte_count.add(value_bytes, m.attributes)

    def acknowledged(self, m: PartitionMetrics, records: Sequence[Record]) -> None:
        """After the target's ack: count and end-to-end latency."""
        now_ms = self._clock() * 1000.0
        stamps = [r.timestamp for r in records]
        m.latency.record(now_ms / 1000.0, count=len(stamps),
                         total=now_ms * len(stamps) - sum(stamps),
                         minimum=now_ms - max(stamps), maximum=now_ms - min(stamps),
                         last=now_ms - stamps[-1])
        m.records.record(now_ms / 1000.0, count=len(stamps), total=len(stamps),
                         minimum=0, maximum=0, last=0)
        self._record_count.add(len(stamps), m.attributes)


def _optional_float(value: int | None) -> float | None:
    return None if value is None else float(value)
