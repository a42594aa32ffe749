"""Byte-exact codecs of MM2's internal records (Heartbeat, Checkpoint, OffsetSync)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirrorline.core.errors import WireFormatError
from mirrorline.core.wire import Checkpoint, Heartbeat, OffsetSync


def h(text: str) -> bytes:
    return bytes.fromhex(text)


# -- heartbeat worked example ----------------------------------------------------------

HB_KEY = h("0007 7072696d617279 0006 6261636b7570")
HB_VALUE = h("0000 0000018bcfe56800")


def test_heartbeat_vector_encode() -> None:
    hb = Heartbeat("primary", "backup", 1700000000000)
    assert hb.encode_key() == HB_KEY
    assert len(HB_KEY) == 17
    assert hb.encode_value() == HB_VALUE
    assert len(HB_VALUE) == 10


def test_heartbeat_vector_decode() -> None:
    assert Heartbeat.decode(HB_KEY, HB_VALUE) == Heartbeat("primary", "backup", 1700000000000)


def test_heartbeat_str() -> None:
    assert str(Heartbeat("primary", "backup", 1700000000000)) == (
        "Heartbeat{sourceClusterAlias=primary, targetClusterAlias=backup, timestamp=1700000000000}"
    )


# -- checkpoint worked example ---------------------------------------------------------

CP_KEY = h("0006 67726f757031 000e 7072696d6172792e6f7264657273 00000003")
CP_VALUE = h("0000 00000000000003ed 00000000000003df 0000")


def test_checkpoint_vector_encode() -> None:
    cp = Checkpoint("group1", "primary.orders", 3, 1005, 991)
    assert cp.encode_key() == CP_KEY
    assert len(CP_KEY) == 28
    assert cp.encode_value() == CP_VALUE
    assert len(CP_VALUE) == 20


def test_checkpoint_vector_decode() -> None:
    cp = Checkpoint.decode(CP_KEY, CP_VALUE)
    assert cp == Checkpoint("group1", "primary.orders", 3, 1005, 991, "")
    assert cp.topic_partition == ("primary.orders", 3)


def test_checkpoint_metadata_length_counts_utf8_bytes() -> None:
    value = Checkpoint("group1", "primary.orders", 3, 1005, 991, "é").encode_value()
    assert len(value) == 22
    assert value == CP_VALUE[:-2] + h("0002 c3a9")
    assert Checkpoint.decode(CP_KEY, value).metadata == "é"


def test_checkpoint_str() -> None:
    cp = Checkpoint("group1", "primary.orders", 3, 1005, 991, "meta")
    assert str(cp) == (
        "Checkpoint{consumerGroupId=group1, topicPartition=primary.orders-3, "
        "upstreamOffset=1005, downstreamOffset=991, metadata=meta}"
    )


# -- offset sync worked example --------------------------------------------------------

OS_KEY = h("0006 6f7264657273 00000003")
OS_VALUE = h("00000000000003e8 00000000000003de")


def test_offset_sync_vector_encode() -> None:
    sync = OffsetSync("orders", 3, 1000, 990)
    assert sync.encode_key() == OS_KEY
    assert len(OS_KEY) == 12
    assert sync.encode_value() == OS_VALUE  # no version header on this topic
    assert len(OS_VALUE) == 16


def test_offset_sync_vector_decode() -> None:
    assert OffsetSync.decode(OS_KEY, OS_VALUE) == OffsetSync("orders", 3, 1000, 990)


def test_offset_sync_str() -> None:
    assert str(OffsetSync("orders", 3, 1000, 990)) == (
        "OffsetSync{topicPartition=orders-3, upstreamOffset=1000, downstreamOffset=990}"
    )


def test_decode_returns_distinct_objects() -> None:
    # The offset-sync store relies on one object per consumed record.
    a = OffsetSync.decode(OS_KEY, OS_VALUE)
    b = OffsetSync.decode(OS_KEY, OS_VALUE)
    assert a == b
    assert a is not b


# -- decoding rules --------------------------------------------------------------------


def test_trailing_bytes_are_ignored() -> None:
    assert OffsetSync.decode(OS_KEY + b"\x01\x02", OS_VALUE + b"junk") == OffsetSync(
        "orders", 3, 1000, 990
    )
    assert Checkpoint.decode(CP_KEY + b"\xff", CP_VALUE + b"\x00\x00") == Checkpoint(
        "group1", "primary.orders", 3, 1005, 991
    )
    assert Heartbeat.decode(HB_KEY + b"x", HB_VALUE + b"y").timestamp == 1700000000000


def test_malformed_utf8_is_replaced() -> None:
    key = h("0003 61ff62 00000000")
    assert OffsetSync.decode(key, OS_VALUE).topic == "a\ufffdb"


def test_non_zero_version_is_parsed_with_v0_layout() -> None:
    # Java only asserts version 0 (assertions are disabled), so other versions parse as v0.
    assert Heartbeat.decode(HB_KEY, h("0001") + HB_VALUE[2:]).timestamp == 1700000000000
    cp = Checkpoint.decode(CP_KEY, h("ffff") + CP_VALUE[2:])
    assert (cp.upstream_offset, cp.downstream_offset) == (1005, 991)


def test_negative_numbers_round_trip_twos_complement() -> None:
    sync = OffsetSync("t", -1, -1, -(2**63))
    assert sync.encode_key()[-4:] == h("ffffffff")
    assert sync.encode_value() == h("ffffffffffffffff 8000000000000000")
    assert OffsetSync.decode(sync.encode_key(), sync.encode_value()) == sync


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        (h("0006 6f7264"), OS_VALUE, "'topic'"),  # string longer than remaining bytes
        (h("ff00"), OS_VALUE, "negative length"),  # negative string length
        (h("00"), OS_VALUE, "'topic'"),  # not even the length fits
        (h("0006 6f7264657273 0000"), OS_VALUE, "'partition'"),  # short INT32
        (OS_KEY, OS_VALUE[:15], "'offset'"),  # short INT64
        (OS_KEY, b"", "'upstreamOffset'"),
        (b"", b"", "offset sync key"),
        (None, OS_VALUE, "null"),
        (OS_KEY, None, "null"),
    ],
)
def test_offset_sync_decode_errors(key: bytes | None, value: bytes | None, fragment: str) -> None:
    with pytest.raises(WireFormatError, match=fragment):
        OffsetSync.decode(key, value)


def test_checkpoint_decode_errors() -> None:
    with pytest.raises(WireFormatError, match="'version'"):
        Checkpoint.decode(CP_KEY, h("00"))
    with pytest.raises(WireFormatError, match="'metadata'"):
        Checkpoint.decode(CP_KEY, CP_VALUE[:-1])
    with pytest.raises(WireFormatError, match="'metadata'"):
        Checkpoint.decode(CP_KEY, CP_VALUE[:-2] + h("0005 6162"))
    with pytest.raises(WireFormatError, match="'group'"):
        Checkpoint.decode(b"", CP_VALUE)
    with pytest.raises(WireFormatError, match="'partition'"):
        Checkpoint.decode(CP_KEY[:-1], CP_VALUE)


def test_heartbeat_decode_errors() -> None:
    with pytest.raises(WireFormatError, match="'targetClusterAlias'"):
        Heartbeat.decode(HB_KEY[:9], HB_VALUE)
    with pytest.raises(WireFormatError, match="'timestamp'"):
        Heartbeat.decode(HB_KEY, HB_VALUE[:9])


def test_decode_accepts_other_buffers() -> None:
    assert OffsetSync.decode(bytearray(OS_KEY), memoryview(OS_VALUE)) == OffsetSync(
        "orders", 3, 1000, 990
    )


# -- encoding limits --------------------------------------------------------------------------


def test_string_limit_is_in_utf8_bytes() -> None:
    assert len(OffsetSync("a" * 32767, 0, 0, 0).encode_key()) == 2 + 32767 + 4
    with pytest.raises(ValueError, match="'topic'"):
        OffsetSync("a" * 32768, 0, 0, 0).encode_key()
    # 16384 two-byte characters = 32768 bytes: over the limit although only 16384 characters.
    with pytest.raises(ValueError, match="'metadata'"):
        Checkpoint("g", "t", 0, 0, 0, "é" * 16384).encode_value()
    with pytest.raises(ValueError, match="'sourceClusterAlias'"):
        Heartbeat("x" * 40000, "b", 0).encode_key()


def test_out_of_range_integers_name_the_field() -> None:
    with pytest.raises(ValueError, match="'partition'"):
        OffsetSync("t", 2**31, 0, 0).encode_key()
    with pytest.raises(ValueError, match="'upstreamOffset'"):
        Checkpoint("g", "t", 0, 2**63, 0).encode_value()
    with pytest.raises(ValueError, match="'timestamp'"):
        Heartbeat("a", "b", -(2**63) - 1).encode_value()


def test_unencodable_characters_become_question_marks() -> None:
    # Java's String.getBytes(UTF_8) replaces lone surrogates with '?'.
    assert OffsetSync("a\ud800b", 0, 0, 0).encode_key()[:5] == h("0003 613f62")


# -- round trips ------------------------------------------------------------------------------

texts = st.text(max_size=50)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


@given(texts, texts, int64)
def test_heartbeat_round_trip(source: str, target: str, ts: int) -> None:
    hb = Heartbeat(source, target, ts)
    assert Heartbeat.decode(hb.encode_key(), hb.encode_value()) == hb


@given(texts, texts, int32, int64, int64, texts)
def test_checkpoint_round_trip(
    group: str, topic: str, partition: int, up: int, down: int, metadata: str
) -> None:
    cp = Checkpoint(group, topic, partition, up, down, metadata)
    assert Checkpoint.decode(cp.encode_key(), cp.encode_value()) == cp


@given(texts, int32, int64, int64)
def test_offset_sync_round_trip(topic: str, partition: int, up: int, down: int) -> None:
    sync = OffsetSync(topic, partition, up, down)
    assert OffsetSync.decode(sync.encode_key(), sync.encode_value()) == sync
