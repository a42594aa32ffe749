"""Which partitions run on the Spark executor rather than the replicator workers (pure).

Per flow, `mirrorline.executor` decides:
* `workers` -- never on Spark; `spark` -- every partition on Spark (while an executor is
  alive);
* `auto` (default) -- a partition goes to Spark when it is *heavy*: its measured load
  stayed above `mirrorline.spark.offload.bytes.per.second` for
  `mirrorline.spark.offload.sustain.seconds`, or its backlog exceeds
  `mirrorline.spark.offload.lag.records`. It comes back when it is light again: backlog
  below `mirrorline.spark.reclaim.lag.records` *and* load below the rate threshold for the
  same sustained period. The gap between the two lag thresholds (hysteresis) and the
  sustain period keep a partition from bouncing between the paths, each move costing a
  fenced hand-over.
An operator's word (`admin partitions offload|reclaim`, stored in the control log) beats
`auto`'s measurements. Without a live Spark executor nothing is on Spark: partitions stay
with (or return to) the workers.

A threshold of 0 disables that criterion.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Literal

from mirrorline.core.assignment import PartitionKey

__all__ = ["EXECUTORS", "Load", "OffloadPolicy", "OffloadSettings", "placement_of"]

Executor = Literal["workers", "spark", "auto"]
EXECUTORS = ("workers", "spark", "auto")


@dataclass(frozen=True)
class OffloadSettings:
    executor: str = "auto"
    offload_bytes_per_second: int = 10 * 1024 * 1024
    sustain_s: int = 60
    offload_lag_records: int = 1_000_000
    reclaim_lag_records: int = 10_000


@dataclass(frozen=True)
class Load:
    """What the current owner last reported for a partition (-1 lag: unknown)."""

    bytes_per_second: float = 0.0
    lag_records: int = -1


def placement_of(placements: Mapping[tuple[str, str, int], str], key: PartitionKey) -> str:
    """The operator's pin for `key` ("spark", "workers" or ""): a partition's own pin wins
    over its topic's (partition -1)."""
    return (placements.get((key.flow, key.topic, key.partition))
            or placements.get((key.flow, key.topic, -1)) or "")


@dataclass
class OffloadPolicy:
    """Remembers since when each partition has been above / below the rate threshold."""

    #: key -> monotonic time since which the rate has been above (True) / below (False).
    _since: dict[PartitionKey, tuple[bool, float]] = field(default_factory=dict)
    #: Why each partition is where the policy put it (for status).
    reasons: dict[PartitionKey, str] = field(default_factory=dict)
    #: Sent to Spark by measurements last time: a partition no owner reports (it is
    #: moving) keeps that place.
    _measured: set[PartitionKey] = field(default_factory=set)

    def decide(self, now: float, partitions: Collection[PartitionKey],
               settings: Mapping[str, OffloadSettings], loads: Mapping[PartitionKey, Load],
               placements: Mapping[tuple[str, str, int], str],
               on_spark: Collection[PartitionKey], spark_alive: bool) -> set[PartitionKey]:
        """The partitions that should run on Spark now.

        `settings`: per flow name; `on_spark`: partitions Spark owns (or is taking over) now.
        """
        wanted: set[PartitionKey] = set()
        previous, reasons = self._measured, self.reasons
        measured: set[PartitionKey] = set()
        self.reasons = {}
        for key in partitions:
            flow = settings.get(key.flow, OffloadSettings())
            load = loads.get(key, Load())
            # A partition between owners has no report: its measurements are not zero but
            # unknown, and judging it on nothing would send it straight back (a bounce).
            reported = key in loads or key not in self._since
            rate_high_for = self._track(now, key, flow, load) if reported \
                else self._since[key]
            if not spark_alive:
                continue
            pin = placement_of(placements, key)
            if flow.executor == "workers":
                continue
            if flow.executor == "spark":
                wanted.add(key)
                self.reasons[key] = "mirrorline.executor = spark"
                continue
            if pin:
                if pin == "spark":
                    wanted.add(key)
                    self.reasons[key] = "offloaded by an operator"
                continue
            if not reported:
                if key in previous:
                    wanted.add(key)
                    measured.add(key)
                    self.reasons[key] = reasons.get(key, "moving to Spark")
                continue
            if self._heavy(key, flow, load, rate_high_for, now, key in on_spark):
                wanted.add(key)
                measured.add(key)
        self._measured = measured
        live = set(partitions)
        for key in [k for k in self._since if k not in live]:
            del self._since[key]
        return wanted

    def _track(self, now: float, key: PartitionKey, flow: OffloadSettings,
               load: Load) -> tuple[bool, float]:
        """(rate above threshold?, since when) -- restarted whenever the side changes."""
        threshold = flow.offload_bytes_per_second
        above = bool(threshold) and load.bytes_per_second > threshold
        state = self._since.get(key)
        if state is None or state[0] != above:
            state = self._since[key] = (above, now)
        return state

    def _heavy(self, key: PartitionKey, flow: OffloadSettings, load: Load,
               rate: tuple[bool, float], now: float, on_spark: bool) -> bool:
        above, since = rate
        sustained = now - since >= flow.sustain_s
        if above and sustained:
            self.reasons[key] = (f"over {flow.offload_bytes_per_second} B/s for "
                                 f"{flow.sustain_s}s")
            return True
        lag = load.lag_records
        if flow.offload_lag_records and lag > flow.offload_lag_records:
            self.reasons[key] = f"backlog {lag} > {flow.offload_lag_records} records"
            return True
        if not on_spark:
            return False
        # On Spark: stay until light on both counts (unknown lag counts as not light).
        lag_light = 0 <= lag < flow.reclaim_lag_records or not flow.offload_lag_records
        rate_light = not above and (sustained or not flow.offload_bytes_per_second)
        if lag_light and rate_light:
            return False
        self.reasons[key] = "still heavy (waiting for the reclaim thresholds)"
        return True
