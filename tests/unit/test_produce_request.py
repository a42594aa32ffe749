"""Flat-encoded produce requests are aiokafka's, byte for byte, with one copy of a batch."""

from __future__ import annotations

import pytest
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from mirrorline import runtime
from mirrorline.kafka.produce_request import (
    BatchParts,
    FlatProduceRequest,
    encode_produce_requests_flat,
    produce_requests_flat,
)


def _batch(values: list[bytes]) -> bytearray:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=value,
                       headers=[("h", b"v")])
    return builder.build()


TOPICS = [
    ("orders", [(0, _batch([b"a" * 100, b"b" * 3])), (7, _batch([b""]))]),
    ("r\u00e9gion.us", [(2, _batch([b"x" * 5000] * 4))]),
]


@pytest.mark.parametrize(("version", "transactional_id"), [
    *((v, None) for v in range(0, 8)),
    *((v, "mirrorline-a->b-0") for v in range(3, 8)),  # transactions need v3
])
def test_the_bytes_are_aiokafkas_for_every_version(version: int,
                                                   transactional_id: str | None) -> None:
    versions = {ProduceRequest.API_KEY: (version, version)}
    plain = ProduceRequest(transactional_id, -1, 30_000,
                           [(t, [(p, bytes(b)) for p, b in parts]) for t, parts in TOPICS])
    flat = FlatProduceRequest(transactional_id, -1, 30_000, TOPICS).prepare(versions)
    assert version == flat.API_VERSION
    assert flat.encode() == plain.prepare(versions).encode()
    # Everything but the encoding is aiokafka's: the response is parsed the same way.
    assert flat.RESPONSE_TYPE is plain.prepare(versions).RESPONSE_TYPE


def test_batches_may_be_views_of_a_fetch_response() -> None:
    data = _batch([b"v" * 1000] * 3)
    view = memoryview(bytes(data))[0:]
    versions = {ProduceRequest.API_KEY: (3, 7)}
    flat = FlatProduceRequest.of(ProduceRequest(None, -1, 1000, [("t", [(0, view)])]))
    plain = ProduceRequest(None, -1, 1000, [("t", [(0, bytes(data))])])
    assert flat.prepare(versions).encode() == plain.prepare(versions).encode()


def test_services_encode_every_producers_requests_flat() -> None:
    """`run_service` installs it; so does this (the same call)."""
    encode_produce_requests_flat()
    assert produce_requests_flat()


def test_malloc_tuning_applies_on_glibc_and_can_be_turned_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import platform
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc only")
    assert runtime.tune_malloc()
    monkeypatch.setenv("MIRRORLINE_MALLOC_TUNING", "0")
    assert not runtime.tune_malloc()


def test_a_batch_in_parts_encodes_as_the_joined_batch() -> None:
    """The batch path hands a rewritten header and the source's records section as two
    pieces (`BatchParts`); the request carries the same bytes as with the batch joined."""
    data = bytes(_batch([b"v" * 1000] * 3))
    versions = {ProduceRequest.API_KEY: (7, 7)}
    parts = BatchParts(bytearray(data[:61]), memoryview(data)[61:])
    flat = FlatProduceRequest(None, -1, 1000, [("t", [(0, parts), (1, data)])])
    plain = ProduceRequest(None, -1, 1000, [("t", [(0, data), (1, data)])])
    assert flat.prepare(versions).encode() == plain.prepare(versions).encode()
    pieces: list[object] = []
    flat.prepare(versions).encode_pieces(pieces)
    assert any(piece is parts.parts[1] for piece in pieces)  # the records, not a copy
