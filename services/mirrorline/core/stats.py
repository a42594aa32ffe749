"""Sampled statistics in the style of Kafka's metrics library, without the clock.

MM2 reports rates and min/max/avg over two 30-second samples. Keeping the same window
shape makes Mirrorline's numbers comparable with an MM2 dashboard. Time is passed in
so the arithmetic is testable without sleeping.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Sample:
    start: float
    count: int = 0
    total: float = 0.0
    minimum: float = float("inf")
    maximum: float = float("-inf")


class SampledStat:
    """Count, total, min, max and rate over the last `samples` windows of `window_s` seconds."""

    def __init__(self, samples: int = 2, window_s: float = 30.0) -> None:
        if samples < 1 or window_s <= 0:
            raise ValueError("samples must be >= 1 and window_s > 0")
        self._samples: list[_Sample] = []
        self._max_samples = samples
        self._window_s = window_s
        self.last: float | None = None

    def record(self, now: float, *, count: int, total: float, minimum: float,
               maximum: float, last: float) -> None:
        """Fold a pre-aggregated group of `count` observations (one replicated batch) in."""
        if count <= 0:
            return
        sample = self._current(now)
        sample.count += count
        sample.total += total
        sample.minimum = min(sample.minimum, minimum)
        sample.maximum = max(sample.maximum, maximum)
        self.last = last

    def _current(self, now: float) -> _Sample:
        if not self._samples or now - self._samples[-1].start >= self._window_s:
            self._samples.append(_Sample(start=now))
            del self._samples[: -self._max_samples]
        return self._samples[-1]

    def _live(self, now: float) -> list[_Sample]:
        horizon = now - self._window_s * self._max_samples
        return [s for s in self._samples if s.start > horizon]

    def count(self, now: float) -> int:
        return sum(s.count for s in self._live(now))

    def total(self, now: float) -> float:
        return sum(s.total for s in self._live(now))

    def minimum(self, now: float) -> float | None:
        live = [s.minimum for s in self._live(now) if s.count]
        return min(live) if live else None

    def maximum(self, now: float) -> float | None:
        live = [s.maximum for s in self._live(now) if s.count]
        return max(live) if live else None

    def average(self, now: float) -> float | None:
        live = self._live(now)
        n = sum(s.count for s in live)
        return sum(s.total for s in live) / n if n else None

    def rate(self, now: float, *, of_count: bool = False) -> float:
        """Per-second rate of the totals (or of the counts) over the sampled span."""
        live = self._live(now)
        if not live:
            return 0.0
        elapsed = max(now - live[0].start, 1.0)
        amount = sum(s.count for s in live) if of_count else sum(s.total for s in live)
        return amount / elapsed
