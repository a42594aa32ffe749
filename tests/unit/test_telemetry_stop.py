"""A service's stop is not held by an OTLP collector that does not answer.

Shutting the OTel providers down flushes the exporters, which waits on the collector;
run on the event loop it froze the whole service (no SIGTERM handling, no gRPC answers)
for as long as the exporter kept trying. The collector here is a real TCP listener that
accepts connections and never says a word -- a collector that hangs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from mirrorline.telemetry import OTLP_ENV, setup_telemetry


class Collector:
    """A collector that accepts connections, reads what comes and never answers."""

    def __init__(self) -> None:
        self.url = ""
        #: Set once an exporter has sent its first bytes (it then waits for an answer).
        self.asked = asyncio.Event()


@pytest.fixture
async def silent_collector() -> AsyncIterator[Collector]:
    collector = Collector()
    held: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # keep the connection open, answer nothing
        if await reader.read(1):
            collector.asked.set()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    collector.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield collector
    finally:
        for writer in held:
            writer.close()
        server.close()


async def test_stopping_with_a_silent_collector_keeps_the_loop_running_and_returns(
        silent_collector: Collector, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OTLP_ENV, silent_collector.url)
    telemetry = setup_telemetry("replicator", instance="t1", metrics_port=None)
    await telemetry.start()
    with telemetry.tracer.start_as_current_span("a batch"):
        pass
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        stopping = asyncio.create_task(telemetry.stop(flush_timeout=2.0))
        # The collector runs on this loop: it reads the exporter's request only if the
        # loop is not frozen by the flush, and the flush is still waiting for the answer.
        await asyncio.wait_for(silent_collector.asked.wait(), 30)
        assert not stopping.done(), "stop returned before the exporter reached the collector"
        asked_at = ticks
        await asyncio.wait_for(stopping, 30)
    finally:
        ticker.cancel()
    # The loop went on serving while the exporter waited on the collector, and stop
    # returned all the same.
    assert ticks > asked_at
