"""The canary: probe records sent through a flow, and what their arrival says about it.

Offsets tell how far behind a mirror is, never whether a record took the path at all. A
canary record is written to every partition of the source's canary topic at a fixed pace
and read back from its remote copy on the target; its send time gives the end-to-end
latency, and its per-partition sequence number shows a record that never came (a gap)
or came twice (a repeat).

Nothing is judged before it could have happened. A flow's path *opens*, per partition,
when the reader sees its first canary there; canaries sent before that (the backlog of a
mirror that is still starting, or of a reader that was not reading) neither give a
latency sample nor count as overdue. Until a partition opens, its canaries are due only
`startup_ms` after the reader started (the service gives the replicator's topic refresh
interval plus the SLO: a canary topic created at start is found by the replicator within
one refresh), so a fresh start is UNKNOWN, not VIOLATED, while the mirror starts.

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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from mirrorline.core.errors import WireFormatError

__all__ = [
    "CanaryRecord",
    "CanaryStatus",
    "FlowCanary",
    "Health",
    "PartitionState",
    "fold_arrival",
    "new_partition_state",
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


#: One partition's windowed arrival state, JSON-shaped so that it can live in a faust table
#: (one entry per flow and partition; see `heartbeat.canary_state`):
#: ``next``      the offset in the remote canary topic after the last record folded in;
#: ``seen``      highest sequence seen per session (keys are sessions as strings);
#: ``samples``   ``[arrival_ms, latency_ms]`` within the window;
#: ``anomalies`` ``[arrival_ms, lost, duplicated]`` within the window;
#: ``lost``/``dup`` totals since the state was first created (they survive restarts).
PartitionState = dict[str, Any]

_SESSIONS_KEPT: Final = 4


def new_partition_state(next_offset: int = 0) -> PartitionState:
    return {"next": next_offset, "seen": {}, "samples": [], "anomalies": [], "lost": 0,
            "dup": 0}


def expire(state: PartitionState, now_ms: int, window_ms: int) -> None:
    """Drop samples and anomalies that left the window."""
    horizon = now_ms - window_ms
    state["samples"] = [s for s in state["samples"] if s[0] >= horizon]
    state["anomalies"] = [a for a in state["anomalies"] if a[0] >= horizon]


def fold_arrival(state: PartitionState, record: CanaryRecord, arrival_ms: int, *,
                 window_ms: int, since_ms: int = 0) -> str | None:
    """Fold one canary read from the target into its partition's state; returns a
    description of an anomaly (gap or repeat), if any.

    A record sent before `since_ms` (the reader's start) gives no latency sample: the
    time it waited while nobody read is not the mirror's latency. Its sequence still
    counts when its session is already known (a resumed state), so that a restart is
    neither a gap nor a repeat; a session never seen before is ignored whole.
    """
    session = str(record.session)
    seen: dict[str, int] = state["seen"]
    last = seen.get(session)
    fresh = record.sent_ms >= since_ms
    if last is None and not fresh:
        return None
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
        seen[session] = record.sequence
        while len(seen) > _SESSIONS_KEPT:
            del seen[min(seen, key=int)]
        if fresh:
            state["samples"].append([arrival_ms, max(0, arrival_ms - record.sent_ms)])
    if lost or duplicated:
        state["lost"] += lost
        state["dup"] += duplicated
        state["anomalies"].append([arrival_ms, lost, duplicated])
    expire(state, arrival_ms, window_ms)
    return anomaly


class FlowCanary:
    """Canary accounting of one flow over a sliding window of `window_ms`.

    The arrival side (latency samples, lost and duplicated counts, sequences seen) is
    per-partition `PartitionState` read through `states`: by default kept here, in the
    service a view of the faust table its agent folds arrivals into, so that a restart
    resumes it. What was sent and has not arrived yet belongs to the sender's session
    and is kept here only (a restarted sender starts a new session).

    Health, judged against `slo_ms`:
    * VIOLATED -- a canary is overdue: sent more than the SLO ago and not arrived (nothing
      arrives: the flow is paused, stuck or down), or the median latency exceeds it. A
      canary of a partition that has not opened yet (see the module) is due only
      `startup_ms` after `started_ms`;
    * DEGRADED -- the 99th percentile exceeds the SLO, or canaries were lost or
      duplicated within the window;
    * OK -- otherwise, once at least one canary arrived;
    * UNKNOWN -- nothing to judge yet, or the service cannot reach a cluster (`unreachable`).
    """

    def __init__(self, *, slo_ms: int, window_ms: int,
                 states: Callable[[], Mapping[int, PartitionState]] | None = None,
                 started_ms: int = 0, startup_ms: int = 0) -> None:
        self.slo_ms = slo_ms
        self.window_ms = window_ms
        #: When the reader started, and how long a partition may take to open after it.
        self.started_ms = started_ms
        self.startup_ms = startup_ms
        #: Partition -> when its first canary arrived (it opened); see `open`.
        self.opened: dict[int, int] = {}
        self._local: dict[int, PartitionState] = {}
        self._states = states or (lambda: self._local)
        #: Sent and not yet seen, per partition: (sequence, sent_ms), in sending order.
        self._pending: dict[int, deque[tuple[int, int]]] = {}
        self.session: int | None = None
        self.unreachable: str | None = None

    def sent(self, record: CanaryRecord) -> None:
        """The sender produced `record` (and the source acknowledged it)."""
        if self.session != record.session:
            self.session = record.session
            self._pending.clear()
        opened = self.opened.get(record.partition)
        if opened is not None and record.sent_ms < opened:
            return  # backlog of before the partition opened: not judged
        self._pending.setdefault(record.partition, deque()).append(
            (record.sequence, record.sent_ms))

    def open(self, partition: int, arrival_ms: int) -> int:
        """The reader read canaries of `partition` at `arrival_ms`; returns when the
        partition opened (its first arrival). What was sent before that is backlog: it
        gives no latency sample (the reader passes the returned time to `fold_arrival`
        as `since_ms`) and is not overdue."""
        opened = self.opened.setdefault(partition, arrival_ms)
        pending = self._pending.get(partition)
        while pending and pending[0][1] < opened:
            pending.popleft()
        return opened

    def _due(self, partition: int, sent_ms: int) -> int:
        due = sent_ms + self.slo_ms
        if partition not in self.opened:
            due = max(due, self.started_ms + self.startup_ms)
        return due

    def seen(self, record: CanaryRecord) -> None:
        """`record` arrived: it and every earlier canary of its partition are not overdue."""
        pending = self._pending.get(record.partition)
        if record.session == self.session and pending:
            while pending and pending[0][0] <= record.sequence:
                pending.popleft()

    def arrived(self, record: CanaryRecord, arrival_ms: int) -> str | None:
        """A canary read from the target, folded into the local state (no table)."""
        state = self._local.setdefault(record.partition, new_partition_state())
        anomaly = fold_arrival(state, record, arrival_ms, window_ms=self.window_ms)
        self.seen(record)
        return anomaly

    @property
    def lost_total(self) -> int:
        return sum(int(s["lost"]) for s in self._states().values())

    @property
    def duplicated_total(self) -> int:
        return sum(int(s["dup"]) for s in self._states().values())

    def _window(self, now_ms: int) -> tuple[list[tuple[int, int]], int, int]:
        """(partition, latency) samples, lost and duplicated within the window at now."""
        horizon = now_ms - self.window_ms
        samples: list[tuple[int, int]] = []
        lost = duplicated = 0
        for partition, state in sorted(self._states().items()):
            samples += [(partition, int(s[1])) for s in state["samples"] if s[0] >= horizon]
            for a in state["anomalies"]:
                if a[0] >= horizon:
                    lost += int(a[1])
                    duplicated += int(a[2])
        return samples, lost, duplicated

    def overdue(self, now_ms: int) -> tuple[int, int, int] | None:
        """The oldest canary past its due time and not arrived yet: (partition, sequence,
        age_ms), or None."""
        oldest: tuple[int, int, int] | None = None
        for partition, pending in self._pending.items():
            if pending:
                sequence, sent = pending[0]
                age = now_ms - sent
                if now_ms > self._due(partition, sent) and (oldest is None
                                                             or age > oldest[2]):
                    oldest = (partition, sequence, age)
        return oldest

    def partition_latencies(self, now_ms: int) -> dict[int, tuple[float, float, float, int]]:
        """Per partition: (p50, p99, max, samples) of the latencies in the window."""
        by_partition: dict[int, list[int]] = {}
        for partition, latency in self._window(now_ms)[0]:
            by_partition.setdefault(partition, []).append(latency)
        out: dict[int, tuple[float, float, float, int]] = {}
        for partition, values in sorted(by_partition.items()):
            p50, p99 = percentile(values, 50), percentile(values, 99)
            assert p50 is not None and p99 is not None
            out[partition] = (p50, p99, float(max(values)), len(values))
        return out

    def status(self, now_ms: int) -> CanaryStatus:
        samples, lost, duplicated = self._window(now_ms)
        latencies = [latency for _partition, latency in samples]
        p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
        top = float(max(latencies)) if latencies else None
        overdue = self.overdue(now_ms)
        slo = self.slo_ms

        def verdict(health: Health, reason: str) -> CanaryStatus:
            return CanaryStatus(health, reason, p50, p99, top, len(latencies), lost,
                                duplicated, self.lost_total, self.duplicated_total)

        if self.unreachable is not None:
            return verdict(Health.UNKNOWN, self.unreachable)
        if overdue is not None:
            partition = overdue[0]
            startup = "" if partition in self.opened else (
                f"; none of this partition has arrived in the {self.startup_ms} ms a "
                "starting mirror is given")
            return verdict(Health.VIOLATED, (
                f"canary {overdue[1]} of partition {partition} sent {overdue[2]} ms ago has "
                f"not arrived (SLO {slo} ms{startup})"))
        if p50 is None:
            if not self.opened and now_ms < self.started_ms + self.startup_ms:
                return verdict(Health.UNKNOWN, (
                    "waiting for the first canary: the mirror may still be starting "
                    f"({self.started_ms + self.startup_ms - now_ms} ms left of the "
                    f"{self.startup_ms} ms it is given)"))
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
