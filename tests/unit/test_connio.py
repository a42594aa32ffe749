"""Our connection I/O (`kafka/connio.py`): responses cut from the bytes however they
arrive, requests sent as aiokafka sends them.

The connection runs over a real socket pair (its requests are read back from the other
end); the broker's side of the reads is played by handing the protocol the bytes of
aiokafka's own response structs in the pieces a socket could deliver them in, which is
what asyncio's transport does after each `recv_into`. No broker is needed for that, and
it makes the split points exact.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import weakref
from collections.abc import AsyncIterator, Sequence
from typing import Any

import aiokafka.conn
import pytest
from aiokafka import errors as kafka_errors
from aiokafka.protocol.fetch import FetchRequest, FetchResponse_v4
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.protocol.types import Int32
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from mirrorline.kafka.connio import (
    SCRATCH_BYTES,
    Connection,
    FrameProtocol,
    ViewFetchRequest,
    own_connection_io,
    use_own_connection_io,
)
from mirrorline.kafka.produce_request import FlatProduceRequest

VERSIONS = {FetchRequest.API_KEY: (4, 4), ProduceRequest.API_KEY: (7, 7)}


def _batch(count: int, size: int) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 30)
    for i in range(count):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i,
                       value=bytes([i % 251]) * size, headers=[])
    return bytes(builder.build())


def _fetch_response(correlation_id: int, records: dict[int, bytes]) -> bytes:
    """A whole Fetch v4 response frame (length prefix, header, body) as a broker sends it."""
    body = FetchResponse_v4(0, [("orders", [(p, 0, 100, 100, [], data)
                                            for p, data in records.items()])]).encode()
    frame = Int32.encode(correlation_id) + body
    return struct.pack(">i", len(frame)) + frame


class Wire:
    """A `Connection` on one end of a socket pair; `peer` is the broker's end."""

    def __init__(self, conn: Connection, protocol: FrameProtocol, peer: socket.socket) -> None:
        self.conn, self.protocol, self.peer = conn, protocol, peer

    def feed(self, data: bytes, pieces: Sequence[int] = ()) -> None:
        """Hand `data` to the protocol as successive reads of the given sizes (then of
        whatever the protocol's buffer takes), as asyncio's transport does."""
        sizes = list(pieces)
        view = memoryview(data)
        while view:
            buffer = self.protocol.get_buffer(-1)
            n = min(len(buffer), len(view), sizes.pop(0) if sizes else len(view))
            buffer[:n] = view[:n]
            view = view[n:]
            self.protocol.buffer_updated(n)

    async def sent(self, size: int) -> bytes:
        loop = asyncio.get_running_loop()
        out = b""
        while len(out) < size:
            out += await loop.sock_recv(self.peer, size - len(out))
        return out


@pytest.fixture
async def wire() -> AsyncIterator[Wire]:
    loop = asyncio.get_running_loop()
    mine, peer = socket.socketpair()
    peer.setblocking(False)
    conn = Connection("broker", 9092, request_timeout_ms=30_000)
    conn._closed_fut = loop.create_future()
    protocol = FrameProtocol(conn._closed_fut, weakref.ref(conn), loop)
    await loop.create_connection(lambda: protocol, sock=mine)
    # What `Connection.connect` does once connected, less the version lookup.
    conn._reader = conn._writer = conn._protocol = protocol
    conn._read_task = conn._create_reader_task()
    conn._versions = VERSIONS
    yield Wire(conn, protocol, peer)
    conn.close()
    peer.close()


def _fetch(request: type[FetchRequest] = FetchRequest) -> Any:
    return request(100, 1, 50 << 20, 0, [("orders", [(0, 0, 1 << 20)])])


async def test_a_response_split_over_many_reads_and_its_length_prefix_split_too(
        wire: Wire) -> None:
    records = _batch(200, 100)
    pending = wire.conn.send(_fetch())
    frame = _fetch_response(1, {0: records})
    # 3 bytes of the length prefix, then its last byte with the header, then odd pieces.
    wire.feed(frame, [3, 1, 7, 1, 4096, 13])
    response = await pending
    assert response.topics[0][1][0][-1] == records
    assert type(response.topics[0][1][0][-1]) is bytes  # aiokafka's consumer needs bytes


async def test_several_responses_in_one_read_answer_their_requests_in_order(
        wire: Wire) -> None:
    batches = [_batch(3, 10 * (i + 1)) for i in range(3)]
    pending = [wire.conn.send(_fetch()) for _ in batches]
    wire.feed(b"".join(_fetch_response(i + 1, {0: b}) for i, b in enumerate(batches)))
    answers = await asyncio.gather(*pending)
    assert [a.topics[0][1][0][-1] for a in answers] == batches
    assert not wire.conn._requests


async def test_a_large_response_arrives_whole_and_a_view_fetch_gets_views_of_it(
        wire: Wire) -> None:
    records = {p: _batch(500, 1024) for p in range(3)}  # about 1.5 MiB, past the scratch
    frame = _fetch_response(1, records)
    assert len(frame) > 10 * SCRATCH_BYTES
    pending = wire.conn.send(_fetch())
    wire.feed(frame, [5, 100_000, 1])
    plain = await pending
    assert {p[0]: p[-1] for p in plain.topics[0][1]} == records

    pending = wire.conn.send(_fetch(ViewFetchRequest))
    wire.feed(_fetch_response(2, records), [2])
    viewed = await pending
    got = {p[0]: p[-1] for p in viewed.topics[0][1]}
    assert all(isinstance(v, memoryview) and v.readonly for v in got.values())
    assert {p: bytes(v) for p, v in got.items()} == records
    # The records were not copied: all three are views of the one received buffer.
    assert len({id(v.obj) for v in got.values()}) == 1


async def test_a_connection_closed_mid_response_fails_the_request_and_closes(
        wire: Wire) -> None:
    frame = _fetch_response(1, {0: _batch(100, 1024)})
    pending = wire.conn.send(_fetch())
    wire.feed(frame[:len(frame) // 2])
    wire.peer.close()  # the broker goes away before the rest
    with pytest.raises(kafka_errors.KafkaConnectionError, match="closed"):
        await pending
    assert not wire.conn.connected()
    assert wire.conn._reader is None  # closed as aiokafka closes a broken connection


async def test_a_response_with_another_correlation_id_closes_the_connection(
        wire: Wire) -> None:
    pending = wire.conn.send(_fetch())
    wire.feed(_fetch_response(7, {0: _batch(3, 10)}))
    with pytest.raises(kafka_errors.CorrelationIdError):
        await pending
    assert not wire.conn.connected()


async def test_requests_go_out_as_aiokafka_encodes_them(wire: Wire) -> None:
    batch = _batch(50, 1024)
    topics = [("orders", [(0, memoryview(batch)), (1, batch)])]
    for request in (FlatProduceRequest(None, -1, 30_000, topics),
                    ProduceRequest(None, -1, 30_000, [("orders", [(0, batch), (1, batch)])]),
                    _fetch()):
        struct_ = request.prepare(VERSIONS)
        header = struct_.build_request_header(correlation_id=wire.conn._correlation_id + 1,
                                              client_id=wire.conn._client_id)
        # aiokafka's own connection sends `size + header.encode() + struct.encode()`
        # (a flat struct encodes as aiokafka's does: test_produce_request.py).
        message = header.encode() + struct_.encode()
        pending = wire.conn.send(request, expect_response=False)
        await pending
        assert await wire.sent(4 + len(message)) == struct.pack(">i", len(message)) + message


def test_services_connect_with_it() -> None:
    """`run_service` installs it; so does this (the same call)."""
    use_own_connection_io()
    assert own_connection_io()
    assert aiokafka.conn.AIOKafkaConnection is Connection
