"""A target that goes silent mid-copy: the replicator says so and checks it, on cue.

An idempotent aiokafka producer never expires a batch whose partition leader it still
knows: during a target outage it retries the batch unseen for as long as the outage lasts.
The replicator watches its batches instead (`DeliveryLoop`'s `stall_after_s`): one
unacknowledged past `request.timeout.ms` aborts the sends, a new producer takes over, and
the partition says the target failed it and checks the target before sending again.

The target here is a real Apache Kafka broker reached only through a TCP proxy this test
controls (the broker advertises the proxy's port). Silencing the proxy is how the broker
goes quiet: connections stay open and nothing comes back, as from a broker that hangs or a
network that drops everything. Nothing is mocked; the proxy only forwards bytes or holds
them. Unlike a SIGSTOPped broker, a silent proxy is ended by the test at will (every held
connection is closed), so teardown never waits on a frozen process.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from helpers import Record, consume_all, create_topic, produce, wait_for
from procs import free_port, mm2_config, replicator

from mirrorline.dev import kafka
from mirrorline.dev.brokers import LocalBroker

pytestmark = [pytest.mark.integration, pytest.mark.kafka_only]

LOOPBACK = "127.0.0.1"


class SilenceableProxy:
    """Forwards TCP connections on `port` to `upstream_port` until told to go silent.

    Silent: bytes from either side are read and dropped, new connections are accepted and
    never answered. `speak()` ends the silence by closing every connection made before it
    (what was held is never delivered late); connections made afterwards are forwarded."""

    def __init__(self, port: int, upstream_port: int) -> None:
        self.port = port
        self._upstream_port = upstream_port
        self._server: asyncio.Server | None = None
        self._silence: asyncio.Event | None = None  # set when the silence ends
        self._open: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, LOOPBACK, self.port)

    def go_silent(self) -> None:
        if self._silence is None:
            self._silence = asyncio.Event()

    def speak(self) -> None:
        silence, self._silence = self._silence, None
        if silence is None:
            return
        silence.set()
        for writer in list(self._open):
            writer.close()

    async def close(self) -> None:
        self.speak()
        if self._server is not None:
            self._server.close()
        for writer in list(self._open):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _accept(self, client_in: asyncio.StreamReader,
                      client_out: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._open.add(client_out)
        upstream_out: asyncio.StreamWriter | None = None
        try:
            silence = self._silence
            if silence is not None:  # a silent broker accepts and never answers
                await silence.wait()
                return
            upstream_in, upstream_out = await asyncio.open_connection(
                LOOPBACK, self._upstream_port)
            self._open.add(upstream_out)
            await asyncio.gather(self._pipe(client_in, upstream_out),
                                 self._pipe(upstream_in, client_out))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for writer in (client_out, upstream_out):
                if writer is not None:
                    self._open.discard(writer)
                    writer.close()
            self._tasks.discard(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                silence = self._silence
                if silence is not None:  # dropped; the connection ends with the silence
                    await silence.wait()
                    break
                writer.write(data)
                await writer.drain()
        writer.close()


@contextlib.asynccontextmanager
async def proxied_kafka(directory: Path) -> AsyncIterator[tuple[SilenceableProxy, str]]:
    """A one-node Apache Kafka cluster whose clients all go through a `SilenceableProxy`:
    it advertises the proxy's port, so metadata never leads a client around it.
    Yields the proxy and the broker's own bootstrap (for the test's reads)."""
    broker_port, proxy_port = free_port(), free_port()
    proxy = SilenceableProxy(proxy_port, broker_port)
    await proxy.start()
    try:
        cluster = await kafka.start_kafka(
            "silent", directory=directory, port=broker_port,
            overrides={"advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{proxy_port}"})
        try:
            yield proxy, cluster.bootstrap
        finally:
            proxy.speak()
            await kafka.stop_kafka(cluster)
    finally:
        await proxy.close()


async def test_a_silent_target_is_checked_after_the_request_timeout_and_copied_once(
        primary: LocalBroker, unique: str, tmp_path: Path) -> None:
    topic, remote = f"{unique}-silent", f"primary.{unique}-silent"
    await create_topic(primary.bootstrap, topic)
    async with proxied_kafka(tmp_path / "kafka") as (proxy, direct):
        # Batches are watched for request.timeout.ms: 2 s here, for a short wait.
        config = mm2_config(
            {"primary": primary, "silent": f"{LOOPBACK}:{proxy.port}"},
            {"primary->silent": {"topics": topic, "refresh.topics.interval.seconds": "2"}},
            silent_producer_request_timeout_ms="2000")
        async with replicator(config, tmp_path, name="silent") as proc:
            try:
                await produce(primary.bootstrap, topic, [Record(b"first", key=b"1")])
                # Copied once: the producer knows the remote partition's leader, the
                # case in which aiokafka would retry a batch unseen for good.
                await consume_all(direct, remote, expected=1)

                # ... and acknowledged: a record on the target whose acknowledgement is
                # still on its way would be sent again unchecked once silenced.
                async def acknowledged() -> bool:
                    status = await proc.replicator_status()
                    return any(p.next_offset >= 1 for p in status.partitions
                               if p.source_topic == topic)
                await wait_for(acknowledged, 30, "the first record was never acknowledged")

                proxy.go_silent()
                await produce(primary.bootstrap, topic, [Record(b"second", key=b"2")])

                said = ""

                async def told() -> bool:
                    nonlocal said
                    status = await proc.replicator_status()
                    said = " | ".join(p.error for p in status.partitions if p.error)
                    return "acknowledged no batch" in said and "checking the target" in said
                await wait_for(told, 30, "no partition said the silent target acknowledged "
                               "nothing and that it checks the target")
                assert "request.timeout.ms" in said, said
                assert "cancelling 1 batches in flight: the target acknowledged no batch" \
                    in proc.log_path.read_text()
            finally:
                proxy.speak()

            # Back: the partition finds the first record on the target, none of the
            # second (it never passed the proxy), and sends that one again, once.
            copied = await consume_all(direct, remote, expected=2, timeout=60)
            assert [(r.key, r.value) for r in copied[0]] == [
                (b"1", b"first"), (b"2", b"second")], copied
