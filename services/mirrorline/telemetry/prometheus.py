"""A minimal asyncio HTTP listener serving `GET /metrics` in Prometheus text format.

prometheus_client's own server runs in a thread; services here keep one event loop
and no hidden threads, and a scrape endpoint needs nothing more than this.

Whoever can reach the port can open connections, so what one connection may cost is
bounded: at most `MAX_CONNECTIONS` are served at once (more are answered 503 and closed at
once), a request head must arrive within `READ_TIMEOUT_S` and fit in `MAX_REQUEST_BYTES`,
and a reply that is not read within `WRITE_TIMEOUT_S` is abandoned. Idle or slow
connections thus hold a bounded number of sockets for a bounded time, and never the event
loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from mirrorline.ports import check_listenable, listen_failure

log = logging.getLogger(__name__)

#: Connections served at once; Prometheus needs one per scraper.
MAX_CONNECTIONS = 32
#: Time a client gets to send its request head.
READ_TIMEOUT_S = 5.0
#: Time a client gets to read the reply.
WRITE_TIMEOUT_S = 10.0
#: Largest request head (request line and headers).
MAX_REQUEST_BYTES = 8192
_BUSY_BODY = b"too many connections; retry later\n"
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
         b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY))


class PrometheusEndpoint:
    def __init__(self, registry: CollectorRegistry, *, host: str, port: int) -> None:
        self._registry = registry
        self._host = host
        self._requested_port = port
        self._server: asyncio.Server | None = None
        self._active: set[asyncio.StreamWriter] = set()
        self.port: int | None = None

    async def start(self) -> None:
        await check_listenable(self._host, self._requested_port, "metrics")
        try:
            self._server = await asyncio.start_server(self._handle, self._host,
                                                      self._requested_port,
                                                      limit=MAX_REQUEST_BYTES)
        except OSError as exc:  # taken between the check and now
            raise listen_failure(self._host, self._requested_port, "metrics",
                                 exc.strerror or str(exc)) from None
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics on http://%s:%d/metrics", self._host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._active):  # wait_closed would wait for them
                writer.transport.abort()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._active) >= MAX_CONNECTIONS:
            writer.write(_BUSY)  # small: fits the socket buffer, no wait for the client
            writer.close()
            return
        self._active.add(writer)
        try:
            await self._serve(reader, writer)
        finally:
            self._active.discard(writer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            line = request.split(b"\r\n", 1)[0].decode("latin-1").split()
            if len(line) >= 2 and line[0] == "GET" and line[1].split("?")[0] == "/metrics":
                body = generate_latest(self._registry)
                head = f"HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE_LATEST}\r\n"
            else:
                body = b"not found: try /metrics\n"
                head = "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n"
            head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            writer.write(head.encode("latin-1") + body)
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), WRITE_TIMEOUT_S)
