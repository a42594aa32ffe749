"""How far a background writer has got, and waiting for it to get somewhere.

The progress store and the bookkeeping appenders write in rounds on a task of their own;
a hand-over must wait until what was handed to them *before* it is written -- not until
they have nothing left to write, which partitions that keep copying may never allow. Each
counts what it has written so far in a `Written`, and a flush waits for the count it
needs.
"""

from __future__ import annotations

import asyncio


class Written:
    """A count that only grows (of saves made durable, of batches finished)."""

    def __init__(self) -> None:
        self.count = 0
        self._moved = asyncio.Event()

    def reached(self, count: int) -> None:
        if count > self.count:
            self.count = count
            self._moved.set()

    async def wait(self, count: int, timeout: float) -> bool:
        """Wait until the count is at least `count`; False if `timeout` passed first."""
        try:
            async with asyncio.timeout(timeout):
                while self.count < count:
                    self._moved.clear()
                    await self._moved.wait()
        except TimeoutError:
            return False
        return True
