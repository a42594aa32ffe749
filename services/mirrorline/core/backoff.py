"""Exponential backoff with jitter, shared by every retry loop in Mirrorline."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """`delay(attempt)` grows from `initial` by `factor` up to `maximum`, +/- `jitter`."""

    initial: float = 0.2
    maximum: float = 30.0
    factor: float = 2.0
    jitter: float = 0.2
    rng: random.Random = field(default_factory=random.Random, repr=False)

    def delay(self, attempt: int) -> float:
        base = min(self.maximum, self.initial * self.factor ** max(0, attempt))
        spread = base * self.jitter
        return max(0.0, base + self.rng.uniform(-spread, spread))
