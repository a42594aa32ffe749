"""The canary: probe records sent through a flow, and what their arrival says about it.

Offsets tell how far behind a mirror is, never whether a record took the path at all. A
canary record is written to every partition of the source's canary topic at a fixed pace
and read back from its remote copy on the target; its send time gives the end-to-end
latency, and its per-partition sequence number shows a record that never came (a gap)
or came twice (a repeat).

Sequence numbers belong to a *session* (the sender's start time): a restarted sender
begins a new session at 1 rather than reading back where the old one stopped, so a
session change is neither a gap nor a repeat.

Everything here is pure: the service feeds in what it sent and what arrived, with the
clock, and asks for a verdict.
"""

from __future__ import annotations

import enum
import math
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from mirrorline.core.errors import WireFormatError

__all__ = [
    "CanaryRecord",
    "CanaryStatus",
    "FlowCanary",
    "Health",
    "percentile",
]

#: Version 0 layout: INT16 version, INT64 session, INT32 partition, INT64 sequence,
#: INT64 send time (epoch ms). Big-endian like MM2's own records.
_LAYOUT: Final = struct.Struct(">hqiqq")
_VERSION: Final = 0

#: The W3C trace-context header every canary record carries.
TRACEPARENT: Final = "traceparent"


@dataclass(frozen=True, slots=True)
class CanaryRecord:
    session: int
    partition: int
    sequence: int
    sent_ms: int

    def encode(self) -> bytes:
        return _LAYOUT.pack(_VERSION, self.session, self.partition, self.sequence,
                            self.sent_ms)

    @classmethod
    def decode(cls, value: bytes | bytearray | memoryview | None) -> CanaryRecord:
        if value is None:
            raise WireFormatError("canary value is null")
        if len(value) < _LAYOUT.size:
            raise WireFormatError(f"canary value has {len(value)} bytes; at least "
                                  f"{_LAYOUT.size} expected")
        version, session, partition, sequence, sent = _LAYOUT.unpack_from(value)
        if version != _VERSION:
            raise WireFormatError(f"canary value has unknown version {version}")
        return cls(session, partition, sequence, sent)


def percentile(values: Iterable[float], q: float) -> float | None:
    """The nearest-rank percentile (q in 0..100) of `values`; None when there are none."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


class Health(enum.Enum):
    UNKNOWN = "UNKNOWN"
    OK = "OK"
    DEGRADED = "DEGRADED"
    VIOLATED = "VIOLATED"


@dataclass(frozen=True)
class CanaryStatus:
    health: Health
    reason: str
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    samples: int = 0
    lost: int = 0
    duplicated: int = 0
    #: Totals since the service started (the counters behind the metrics).
    lost_total: int = 0
    duplicated_total: int = 0


@dataclass
class _Partition:
    #: Highest sequence seen per session (the current one and a few older ones).
    last_seen: dict[int, int] = field(default_factory=dict)
    #: Sent and not yet seen: (sequence, sent_ms), in sending order.
    pending: deque[tuple[int, int]] = field(default_factory=deque)


class FlowCanary:
    """Canary accounting of one flow over a sliding window of `window_ms`.

    Health, judged against `slo_ms`:
    * VIOLATED -- a canary is overdue by more than the SLO (nothing arrives: the flow is
      paused, stuck or down), or the median latency exceeds it;
    * DEGRADED -- the 99th percentile exceeds the SLO, or canaries were lost or
      duplicated within the window;
    * OK -- otherwise, once at least one canary arrived;
    * UNKNOWN -- nothing to judge yet, or the service cannot reach a cluster (`unreachable`).
    """

    _SESSIONS_KEPT: Final = 4

    def __init__(self, *, slo_ms: int, window_ms: int) -> None:
        self.slo_ms = slo_ms
        self.window_ms = window_ms
        self._partitions: dict[int, _Partition] = {}
        #: (arrival_ms, partition, latency_ms) within the window.
        self._samples: deque[tuple[int, int, int]] = deque()
        #: (arrival_ms, lost, duplicated) events within the window.
        self._anomalies: deque[tuple[int, int, int]] = deque()
        self.lost_total = 0
        self.duplicated_total = 0
        self.session: int | None = None
        self.unreachable: str | None = None

    def _partition(self, partition: int) -> _Partition:
        return self._partitions.setdefault(partition, _Partition())

    def sent(self, record: CanaryRecord) -> None:
        """The sender produced `record` (and the source acknowledged it)."""
        if self.session != record.session:
            self.session = record.session
            for state in self._partitions.values():
                state.pending.clear()
        self._partition(record.partition).pending.append((record.sequence, record.sent_ms))

    def arrived(self, record: CanaryRecord, arrival_ms: int) -> str | None:
        """A canary read from the target; returns a description of an anomaly, if any."""
        state = self._partition(record.partition)
        last = state.last_seen.get(record.session)
        anomaly: str | None = None
        lost = duplicated = 0
        if last is not None and record.sequence <= last:
            duplicated = 1
            anomaly = f"canary {record.sequence} of partition {record.partition} repeated"
        else:
            if last is not None and record.sequence > last + 1:
                lost = record.sequence - last - 1
                anomaly = (f"{lost} canaries of partition {record.partition} missing "
                           f"(sequence {last + 1}..{record.sequence - 1})")
            state.last_seen[record.session] = record.sequence
            while len(state.last_seen) > self._SESSIONS_KEPT:
                del state.last_seen[min(state.last_seen)]
            self._samples.append((arrival_ms, record.partition,
                                  max(0, arrival_ms - record.sent_ms)))
        if record.session == self.session:
            while state.pending and state.pending[0][0] <= record.sequence:
                state.pending.popleft()
        if lost or duplicated:
            self.lost_total += lost
            self.duplicated_total += duplicated
            self._anomalies.append((arrival_ms, lost, duplicated))
        return anomaly

    def _expire(self, now_ms: int) -> None:
        horizon = now_ms - self.window_ms
        while self._samples and self._samples[0][0] < horizon:
            self._samples.popleft()
        while self._anomalies and self._anomalies[0][0] < horizon:
            self._anomalies.popleft()

    def overdue(self, now_ms: int) -> tuple[int, int, int] | None:
        """The oldest canary not arrived yet: (partition, sequence, age_ms), or None."""
        oldest: tuple[int, int, int] | None = None
        for partition, state in self._partitions.items():
            if state.pending:
                sequence, sent = state.pending[0]
                age = now_ms - sent
                if oldest is None or age > oldest[2]:
                    oldest = (partition, sequence, age)
        return oldest

    def partition_latencies(self, now_ms: int) -> dict[int, tuple[float, float, float, int]]:
        """Per partition: (p50, p99, max, samples) of the latencies in the window."""
        self._expire(now_ms)
        by_partition: dict[int, list[int]] = {}
        for _arrival, partition, latency in self._samples:
            by_partition.setdefault(partition, []).append(latency)
        out: dict[int, tuple[float, float, float, int]] = {}
        for partition, values in sorted(by_partition.items()):
            p50, p99 = percentile(values, 50), percentile(values, 99)
            assert p50 is not None and p99 is not None
            out[partition] = (p50, p99, float(max(values)), len(values))
        return out

    def status(self, now_ms: int) -> CanaryStatus:
        self._expire(now_ms)
        latencies = [s[2] for s in self._samples]
        p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
        top = float(max(latencies)) if latencies else None
        lost = sum(a[1] for a in self._anomalies)
        duplicated = sum(a[2] for a in self._anomalies)
        overdue = self.overdue(now_ms)
        slo = self.slo_ms

        def verdict(health: Health, reason: str) -> CanaryStatus:
            return CanaryStatus(health, reason, p50, p99, top, len(latencies), lost,
                                duplicated, self.lost_total, self.duplicated_total)

        if self.unreachable is not None:
            return verdict(Health.UNKNOWN, self.unreachable)
        if overdue is not None and overdue[2] > slo:
            return verdict(Health.VIOLATED, (
                f"canary {overdue[1]} of partition {overdue[0]} sent {overdue[2]} ms ago has "
                f"not arrived (SLO {slo} ms)"))
        if p50 is None:
            return verdict(Health.UNKNOWN, "no canary has arrived in the window yet")
        assert p99 is not None
        if p50 > slo:
            return verdict(Health.VIOLATED, f"median latency {p50:.0f} ms exceeds the SLO "
                                            f"of {slo} ms")
        if p99 > slo:
            return verdict(Health.DEGRADED, f"p99 latency {p99:.0f} ms exceeds the SLO of "
                                            f"{slo} ms")
        if lost or duplicated:
            return verdict(Health.DEGRADED, f"{lost} canaries lost and {duplicated} "
                                            "duplicated in the window")
        return verdict(Health.OK, f"p99 {p99:.0f} ms within the SLO of {slo} ms")
