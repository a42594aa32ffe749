"""A TCP proxy in front of a real Apache Kafka broker, for tests that need the network to
misbehave on cue. Import as `from proxy import ...` (like `helpers`).

`KafkaProxy` forwards Kafka's frames (a 4-byte size, then the request or response) and
reads just enough of each to follow produce requests: which are outstanding on each
connection (sent by the client, not yet answered to it), and the most ever outstanding at
once. On cue it

* goes silent (`go_silent`): bytes from either side are dropped, new connections are
  accepted and never answered, as from a broker that hangs; `speak()` ends the silence by
  closing every connection made before it (nothing held is delivered late);
* holds produce responses to one client (`hold`): they reach the client only once
  `release()` says so, or for `delay` seconds each, as from a broker slow to acknowledge;
* cuts every connection (`cut()`), as a network failure does, with whatever it held.

Nothing is mocked: the broker is real and every byte that is delivered is its own.
`proxied_kafka` starts a one-node Apache Kafka cluster that advertises the proxy's port,
so metadata never leads a client around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from procs import free_port

from mirrorline.dev import kafka

LOOPBACK = "127.0.0.1"
_PRODUCE = 0


@dataclass
class _Connection:
    #: The client id its requests carry (learned from its first request).
    client_id: str = ""
    #: Correlation ids of produce requests sent and not yet answered.
    produce: set[int] = field(default_factory=set)
    most: int = 0
    #: Produce responses passed to the client.
    answered: int = 0


class KafkaProxy:
    def __init__(self, port: int, upstream_port: int) -> None:
        self.port = port
        self._upstream_port = upstream_port
        self._server: asyncio.Server | None = None
        self._silence: asyncio.Event | None = None  # set when the silence ends
        self._open: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections: list[_Connection] = []
        #: Produce responses to clients whose id ends so are held (`hold`).
        self._held_client: str | None = None
        self._delay: float | None = None
        self._after = 0
        self._released = asyncio.Event()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, LOOPBACK, self.port)

    # -- cues -----------------------------------------------------------------------------
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

    def hold(self, client_suffix: str, *, delay: float | None = None, after: int = 0) -> None:
        """Hold the produce responses to clients whose id ends with `client_suffix`, once
        `after` of them went through on a connection: until `release()`, or (`delay`)
        that long each."""
        self._held_client, self._delay, self._after = client_suffix, delay, after
        self._released.clear()

    def release(self) -> None:
        self._held_client = None
        self._released.set()

    def cut(self) -> None:
        """Close every connection now; what was held is never delivered (and responses
        are no longer held)."""
        for writer in list(self._open):
            writer.close()
        self.release()

    def forget(self) -> None:
        """Count afresh: forget the connections seen so far."""
        self._connections = []

    def most_outstanding(self, client_suffix: str) -> int:
        """The most produce requests ever outstanding at once on one connection of a
        client whose id ends with `client_suffix`."""
        return max((c.most for c in self._connections if c.client_id.endswith(client_suffix)),
                   default=0)

    async def close(self) -> None:
        self.speak()
        self.release()
        if self._server is not None:
            self._server.close()
        self.cut()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    # -- forwarding -----------------------------------------------------------------------
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
            connection = _Connection()
            self._connections.append(connection)
            await asyncio.gather(self._requests(client_in, upstream_out, connection),
                                 self._responses(upstream_in, client_out, connection))
        except (OSError, asyncio.CancelledError, asyncio.IncompleteReadError):
            pass
        finally:
            for writer in (client_out, upstream_out):
                if writer is not None:
                    self._open.discard(writer)
                    writer.close()
            self._tasks.discard(task)

    async def _frames(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                size = await reader.readexactly(4)
                yield size + await reader.readexactly(struct.unpack(">i", size)[0])

    async def _silenced(self) -> bool:
        """Wait out a silence (then the connection ends: True)."""
        silence = self._silence
        if silence is None:
            return False
        await silence.wait()
        return True

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        connection: _Connection) -> None:
        with contextlib.suppress(OSError):
            async for frame in self._frames(reader):
                if await self._silenced():
                    break
                api_key, _version, correlation, id_length = struct.unpack(">hhih", frame[4:14])
                if not connection.client_id and id_length > 0:
                    connection.client_id = frame[14:14 + id_length].decode()
                if api_key == _PRODUCE:
                    connection.produce.add(correlation)
                    connection.most = max(connection.most, len(connection.produce))
                writer.write(frame)
                await writer.drain()
        writer.close()

    async def _responses(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         connection: _Connection) -> None:
        with contextlib.suppress(OSError):
            async for frame in self._frames(reader):
                if await self._silenced():
                    break
                correlation = struct.unpack(">i", frame[4:8])[0]
                if correlation in connection.produce:
                    held = self._held_client
                    if (held is not None and connection.client_id.endswith(held)
                            and connection.answered >= self._after):
                        if self._delay is not None:
                            await asyncio.sleep(self._delay)
                        else:
                            await self._released.wait()
                    connection.produce.discard(correlation)
                    connection.answered += 1
                if writer.is_closing():
                    break
                writer.write(frame)
                await writer.drain()
        writer.close()


@contextlib.asynccontextmanager
async def proxied_kafka(directory: Path) -> AsyncIterator[tuple[KafkaProxy, str]]:
    """A one-node Apache Kafka cluster whose clients all go through a `KafkaProxy`: it
    advertises the proxy's port, so metadata never leads a client around it.
    Yields the proxy and the broker's own bootstrap (for the test's reads)."""
    broker_port, proxy_port = free_port(), free_port()
    proxy = KafkaProxy(proxy_port, broker_port)
    await proxy.start()
    try:
        cluster = await kafka.start_kafka(
            "proxied", directory=directory, port=broker_port,
            overrides={"advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{proxy_port}"})
        try:
            yield proxy, cluster.bootstrap
        finally:
            proxy.speak()
            proxy.release()
            await kafka.stop_kafka(cluster)
    finally:
        await proxy.close()
