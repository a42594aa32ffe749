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


@pytest.fixture
async def silent_collector() -> AsyncIterator[str]:
    held: list[asyncio.StreamWriter] = []

    async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # keep the connection open, answer nothing

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for writer in held:
            writer.close()
        server.close()


async def test_stopping_with_a_silent_collector_keeps_the_loop_running_and_returns(
        silent_collector: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OTLP_ENV, silent_collector)
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
        await asyncio.wait_for(telemetry.stop(flush_timeout=1.0), 30)
    finally:
        ticker.cancel()
    # The loop went on serving while the exporter waited on the collector.
    assert ticks > 0
