"""aiokafka's broker connections with our own socket I/O: fewer copies of every byte.

aiokafka's `AIOKafkaConnection` reads a response with `StreamReader.readexactly`: the
socket's bytes arrive as a fresh chunk, are appended to the stream's buffer, copied out
as the response, and aiokafka's parsing copies the records of a Fetch response out of
that once more (three copies after the kernel's). The stream also pauses and resumes the
socket every 128 KiB of a large response. A request is sent as `size + header + body`,
two more copies of the body. On the batch path, where nothing else touches a record,
those copies were about a fifth of the replicator's CPU at 1 KiB records (py-spy).

`Connection` keeps everything of aiokafka's connection (connecting, version lookup,
SASL, correlation ids, request timeouts, the idle close, closing on error and failing the
requests in flight) and replaces only the bytes' way in and out:

- **In**: `FrameProtocol`, an `asyncio.BufferedProtocol`, has the socket receive into its
  own buffers. A response that arrives whole in one read is taken from a small scratch
  buffer; a larger one is received straight into one buffer of its size, read from its
  4-byte length prefix. The response is decoded from that buffer (`FrameReader`): its
  records come out as one copy (aiokafka's consumer needs `bytes`), or, for a Fetch
  request built by `ViewFetchRequest` (our raw fetches, `kafka/rawbatches.py`), as a
  read-only `memoryview` of the buffer: no copy at all. Responses are handled as their
  last byte arrives, without a reader task's round trip.
- **Out**: a produce request built by `kafka/produce_request.py` hands over its pieces:
  each batch (on the batch path, the source's records section itself) is written to the
  transport as it is, and the small pieces between them (size, header, field lengths)
  are joined. A batch's bytes are then copied only by the kernel, where aiokafka copied
  them three times more (and our flat request once).

Plain and TLS connections take the same path (asyncio's TLS transport decrypts straight
into the protocol's buffer). The bytes on the wire are unchanged. Services install it for
every aiokafka client of the process at start (`use_own_connection_io`, called by
`mirrorline.runtime`), as they encode produce requests flat.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import io
import logging
import struct
import time
import weakref
from collections.abc import Callable
from typing import Any, Final

import aiokafka.conn
import aiokafka.errors as Errors
from aiokafka.conn import AIOKafkaConnection, CloseReason
from aiokafka.protocol.coordination import FindCoordinatorResponse_v0
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.util import wait_for

__all__ = [
    "Connection",
    "FrameProtocol",
    "FrameReader",
    "ViewFetchRequest",
    "own_connection_io",
    "use_own_connection_io",
]

#: aiokafka's connection logger: its messages keep their name and level.
log = logging.getLogger("aiokafka.conn")

_SIZE: Final = struct.Struct(">i")
#: Scratch buffer for the socket's reads between large responses. A response that does
#: not arrive whole in it goes on in a buffer of its own.
SCRATCH_BYTES: Final = 32 << 10
#: A request's pieces of at least this many bytes (a produce request's batches) are
#: written to the transport as they are; the pieces between them are joined.
WRITE_AS_IS_BYTES: Final = 64 << 10
#: `FrameReader` hands out a view instead of a copy for reads of at least this many bytes
#: (in view mode): only records fields are that long in a Fetch response.
VIEW_MIN_BYTES: Final = 4 << 10


_bytearray_of = ctypes.pythonapi.PyByteArray_FromStringAndSize
_bytearray_of.restype = ctypes.py_object
_bytearray_of.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)


def _receive_buffer(size: int) -> bytearray:
    """A bytearray of `size` bytes, not zeroed (`bytearray(size)` writes every byte once
    more): the socket fills all of it before anything reads it."""
    buffer: bytearray = _bytearray_of(None, size)
    return buffer


def write_pieces(write: Callable[[Any], None], pieces: list[Any]) -> None:
    """Write `pieces` in order, each large one as it is, the small ones between joined."""
    small: list[Any] = []
    for piece in pieces:
        if len(piece) < WRITE_AS_IS_BYTES:
            small.append(piece)
            continue
        if small:
            write(b"".join(small))
            small = []
        write(piece)
    if small:
        write(b"".join(small))


class FrameReader:
    """A response's bytes, read as aiokafka's decoders read an `io.BytesIO`.

    `read(n)` returns `bytes`; with `views`, a read of at least `VIEW_MIN_BYTES` returns a
    read-only `memoryview` of the buffer instead (no copy)."""

    __slots__ = ("_end", "_pos", "_view", "_views")

    def __init__(self, buffer: bytes | bytearray | memoryview, *, views: bool = False) -> None:
        self._view = memoryview(buffer).toreadonly()
        self._pos = 0
        self._end = len(self._view)
        self._views = views

    def read(self, size: int = -1) -> bytes | memoryview:
        pos = self._pos
        end = self._end if size < 0 else min(pos + size, self._end)
        self._pos = end
        if self._views and end - pos >= VIEW_MIN_BYTES:
            return self._view[pos:end]
        return self._view[pos:end].tobytes()

    def tell(self) -> int:
        return self._pos


def _retrieved(future: asyncio.Future[None]) -> None:
    """Marks the end as seen: the reader task may be gone (cancelled by `close`)."""
    if not future.cancelled():
        future.exception()


class FrameProtocol(asyncio.BufferedProtocol):
    """The socket side of one `Connection`: cuts the received bytes into responses.

    Each response goes to the connection's `_handle_frame` as it completes. The protocol
    holds the connection only weakly (a leaked connection is still collected, and warns,
    as aiokafka's does). `ended` gets the connection's end: the error that broke it, or
    `asyncio.IncompleteReadError` when the broker closed it (as `readexactly` raises).
    """

    def __init__(self, closed: asyncio.Future[None], conn: Callable[[], Any],
                 loop: asyncio.AbstractEventLoop) -> None:
        self._closed = closed
        self._conn = conn
        self._loop = loop
        self.ended: asyncio.Future[None] = loop.create_future()
        self.ended.add_done_callback(_retrieved)
        self._transport: asyncio.Transport | None = None
        self._scratch = bytearray(SCRATCH_BYTES)
        self._scratch_view = memoryview(self._scratch)
        self._have = 0  # bytes in the scratch buffer
        self._frame: bytearray | None = None  # a response being received whole
        self._frame_view: memoryview | None = None
        self._got = 0
        self._eof = False
        self._failed = False
        self._paused = False
        self._drain_waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    # -- asyncio's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame_view is not None:
            return self._frame_view[self._got:]
        return self._scratch_view[self._have:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._failed:
            return
        try:
            if self._frame is not None:
                self._got += nbytes
                if self._got == len(self._frame):
                    frame = self._frame
                    self._frame = self._frame_view = None
                    self._deliver(frame)
            else:
                self._have += nbytes
                self._cut()
        except Exception as exc:  # it ends the connection, as in aiokafka's read task
            self._fail(exc)

    def _cut(self) -> None:
        """Hand on every whole response in the scratch buffer; a response that is not
        whole goes on in a buffer of its own."""
        scratch, have, pos = self._scratch, self._have, 0
        while have - pos >= 4 and not self._failed:
            (size,) = _SIZE.unpack_from(scratch, pos)
            if size < 0:
                raise Errors.KafkaConnectionError(f"response of negative size {size}")
            start = pos + 4
            if have - start >= size:
                self._deliver(bytes(self._scratch_view[start:start + size]))
                pos = start + size
                continue
            frame = _receive_buffer(size)
            got = have - start
            frame[:got] = self._scratch_view[start:have]
            self._frame, self._frame_view, self._got = frame, memoryview(frame), got
            pos = have
            break
        left = have - pos
        if left and pos:
            scratch[:left] = self._scratch_view[pos:have]
        self._have = left

    def _deliver(self, frame: bytes | bytearray) -> None:
        conn = self._conn()
        if conn is None or conn._reader is None:  # gone, or closed: nothing waits
            self._failed = True
            return
        conn._handle_frame(frame)

    def _fail(self, exc: BaseException) -> None:
        self._failed = True
        if not self.ended.done():
            self.ended.set_exception(exc)

    def eof_received(self) -> bool | None:
        self._eof = True
        return None  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        if exc is None:  # the broker closed it: what `readexactly` raises at its end
            exc = asyncio.IncompleteReadError(
                b"", 4 if self._frame is None else len(self._frame) - self._got)
        self._fail(exc)
        self._frame = self._frame_view = None
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_exception(ConnectionResetError("Connection lost"))
        self._drain_waiters.clear()
        if not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()

    # -- what aiokafka's connection uses of its StreamReader and StreamWriter

    def at_eof(self) -> bool:
        return self._eof

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert self._transport is not None
        self._transport.write(data)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    async def drain(self) -> None:
        if self._eof or self._transport is None or self._transport.is_closing():
            await asyncio.sleep(0)
            if self._eof:
                raise ConnectionResetError("Connection lost")
        if not self._paused:
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter


class _ViewStruct:
    """Marks a request struct whose response's records are read as views (mixed in)."""

    RECORDS_AS_VIEWS = True


_VIEWS: dict[type[Any], type[Any]] = {}


def _viewing(struct_class: type[Any]) -> type[Any]:
    viewing = _VIEWS.get(struct_class)
    if viewing is None:
        viewing = _VIEWS[struct_class] = type(struct_class.__name__, (struct_class, _ViewStruct),
                                              {})
    return viewing


class ViewFetchRequest(FetchRequest):  # type: ignore[misc]
    """aiokafka's `FetchRequest` whose response's records are read-only views of the
    received buffer when `Connection` is installed (`bytes` otherwise). The views keep
    the whole response's buffer alive while any of them is."""

    def build(self, request_struct_class: type[Any]) -> Any:
        return super().build(_viewing(request_struct_class))


class Connection(AIOKafkaConnection):  # type: ignore[misc]
    """aiokafka's connection with `FrameProtocol` for its bytes (see the module)."""

    async def connect(self) -> tuple[Any, Any]:
        loop = self._loop
        self._closed_fut = loop.create_future()
        if self._security_protocol in ("PLAINTEXT", "SASL_PLAINTEXT"):
            ssl = None
        else:
            assert self._security_protocol in ("SSL", "SASL_SSL")
            assert self._ssl_context is not None
            ssl = self._ssl_context
        protocol = FrameProtocol(self._closed_fut, weakref.ref(self), loop)
        async with asyncio.timeout(self._request_timeout):
            await loop.create_connection(lambda: protocol, self.host, self.port, ssl=ssl)
        self._reader = self._writer = self._protocol = protocol
        self._read_task = self._create_reader_task()
        if self._max_idle_ms is not None:
            self._idle_handle = loop.call_soon(self._idle_check, weakref.ref(self))
        try:
            await self._do_version_lookup()
            if self._security_protocol in ("SASL_SSL", "SASL_PLAINTEXT"):
                await self._do_sasl_handshake()
        except BaseException:
            self.close()
            raise
        return protocol, protocol

    @staticmethod
    async def _read(self_ref: Callable[[], Any]) -> None:
        """The reader task: the responses are handled by the protocol as they arrive; the
        task ends with the connection, with what ended it (aiokafka then closes it)."""
        self = self_ref()
        if self is None:
            return
        ended = self._protocol.ended
        del self
        await ended

    def send(self, request: Any, expect_response: bool = True) -> Any:
        if self._writer is None:
            raise Errors.KafkaConnectionError(
                f"No connection to broker at {self._host}:{self._port}")
        request_struct = request.prepare(self._versions)
        correlation_id = self._next_correlation_id()
        header = request_struct.build_request_header(
            correlation_id=correlation_id, client_id=self._client_id)
        pieces: list[Any] = [b"", header.encode()]
        encode_pieces = getattr(request_struct, "encode_pieces", None)
        if encode_pieces is not None:
            encode_pieces(pieces)
        else:
            pieces.append(request_struct.encode())
        pieces[0] = _SIZE.pack(sum(map(len, pieces)))
        try:
            write_pieces(self._writer.write, pieces)
        except OSError as err:
            self.close(reason=CloseReason.CONNECTION_BROKEN)
            raise Errors.KafkaConnectionError(
                f"Connection at {self._host}:{self._port} broken: {err}") from err
        log.debug("Request to %s:%d %d: %s", self._host, self._port, correlation_id,
                  request_struct)
        if not expect_response:
            return self._writer.drain()
        fut = self._loop.create_future()
        self._requests.append((correlation_id, request_struct, fut))
        return wait_for(fut, self._request_timeout)

    def _handle_frame(self, resp: bytes | bytearray) -> None:
        correlation_id, request, fut = self._requests[0]
        if correlation_id is None:  # a SASL token before Kafka 1.0: passed on as it is
            if not fut.done():
                fut.set_result(bytes(resp))
        else:
            views = getattr(request, "RECORDS_AS_VIEWS", False)
            reader: Any = io.BytesIO(resp) if isinstance(resp, bytes) and not views else \
                FrameReader(resp, views=views)
            response_header = request.parse_response_header(reader)
            resp_type = request.RESPONSE_TYPE
            if resp_type is FindCoordinatorResponse_v0 and correlation_id != 0 and \
                    response_header.correlation_id == 0:
                log.warning("Kafka 0.8.2 quirk -- FindCoordinatorResponse correlation id "
                            "does not match request. This should go away once at least "
                            "one topic has been initialized on the broker")
            elif response_header.correlation_id != correlation_id:
                error = Errors.CorrelationIdError(
                    f"Correlation ids do not match: sent {correlation_id},"
                    f" recv {response_header.correlation_id}")
                if not fut.done():
                    fut.set_exception(error)
                self.close(reason=CloseReason.OUT_OF_SYNC)
                return
            if not fut.done():
                response = resp_type.decode(reader)
                log.debug("Response from %s:%d %d: %s", self._host, self._port,
                          correlation_id, response)
                fut.set_result(response)
        self._last_action = time.monotonic()
        self._requests.popleft()


def use_own_connection_io() -> None:
    """From now on every aiokafka client of this process connects with `Connection`."""
    module: Any = aiokafka.conn
    module.AIOKafkaConnection = Connection


def own_connection_io() -> bool:
    module: Any = aiokafka.conn
    return module.AIOKafkaConnection is Connection
