"""Flows the executor cannot start now, and when to try each again.

One query copies every flow, so a flow whose cluster does not answer must not keep the
others from running: it is held back, the query runs without it, and it is tried again
after a delay that doubles with each failure (`FIRST_S` up to `MAX_S`). Every retry
restarts the query (drained), which is why retries are spaced out rather than made at
every turn of the control-log loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable

FIRST_S = 5.0
MAX_S = 60.0


class Holds:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        #: flow -> (when to try again, the delay after the next failure)
        self._held: dict[str, tuple[float, float]] = {}

    def failed(self, flow: str) -> float:
        """`flow` could not start: hold it; returns for how long."""
        _, delay = self._held.get(flow, (0.0, FIRST_S))
        self._held[flow] = (self._clock() + delay, min(delay * 2, MAX_S))
        return delay

    def started(self, flow: str) -> None:
        self._held.pop(flow, None)

    def held(self, flow: str) -> bool:
        """Still waiting to be tried again."""
        entry = self._held.get(flow)
        return entry is not None and self._clock() < entry[0]
