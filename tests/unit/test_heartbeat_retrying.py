"""The heartbeat service's one retry loop (`heartbeat/retrying.py`), without brokers: the
failures are the test's own exceptions, the only thing a broker would add."""

from __future__ import annotations

import asyncio
import logging

import pytest

from mirrorline import runtime
from mirrorline.heartbeat import retrying
from mirrorline.heartbeat.retrying import Retrying
from mirrorline.runtime import cancel_and_wait


class Flaky(Retrying):
    """Fails `failures` times with the same reason, then connects and runs."""

    def __init__(self, failures: int) -> None:
        super().__init__("flaky part")
        self.failures = failures
        self.attempts = 0
        self.running = asyncio.Event()

    async def _session(self) -> None:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise ConnectionError("cluster 'x' does not answer")
        self._ready()
        self.running.set()
        await asyncio.Event().wait()


async def test_says_why_once_retries_then_clears_the_error(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retrying, "MAX_BACKOFF_S", 0.01)
    part = Flaky(failures=3)
    with caplog.at_level(logging.INFO, logger="mirrorline.heartbeat.retrying"):
        part.start()
        await asyncio.wait_for(part.running.wait(), 10)
        await part.stop()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["flaky part: ConnectionError(\"cluster 'x' does not answer\"); "
                        "retrying"]
    assert any("reachable again" in r.getMessage() for r in caplog.records)
    assert part.attempts == 4 and part.error is None


async def test_a_task_that_swallows_a_cancellation_is_cancelled_until_it_ends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As aiokafka's bootstrap does when cancelled while connecting: the task would carry
    on into its next attempt, and a stop awaiting it would never end."""
    monkeypatch.setattr(runtime, "RECANCEL_S", 0.05)
    swallowed = 0

    async def stubborn() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                swallowed += 1
                if swallowed >= 3:
                    raise

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task), 10)
    assert task.cancelled() and swallowed == 3
