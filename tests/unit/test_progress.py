"""Connect source-offset records, byte for byte as Java MM2 stores them (MirrorUtils)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirrorline.core.progress import (
    CHECKPOINT_CONNECTOR,
    HEARTBEAT_CONNECTOR,
    SOURCE_CONNECTOR,
    SourceProgress,
    checkpoint_offset_key,
    decode_source_progress,
    encode_offset,
    heartbeat_offset_key,
    progress_topic,
    source_offset_key,
)


def test_connector_names_and_topic() -> None:
    assert SOURCE_CONNECTOR == "MirrorSourceConnector"
    assert CHECKPOINT_CONNECTOR == "MirrorCheckpointConnector"
    assert HEARTBEAT_CONNECTOR == "MirrorHeartbeatConnector"
    assert progress_topic("primary") == "mm2-offsets.primary.internal"


def test_source_key_bytes() -> None:
    assert source_offset_key("primary", "orders", 0) == (
        b'["MirrorSourceConnector",{"cluster":"primary","partition":0,"topic":"orders"}]')


def test_checkpoint_key_bytes() -> None:
    assert checkpoint_offset_key("group1", "primary.orders", 3) == (
        b'["MirrorCheckpointConnector",{"partition":3,"topic":"primary.orders",'
        b'"group":"group1"}]')


def test_heartbeat_key_bytes() -> None:
    assert heartbeat_offset_key("primary", "backup") == (
        b'["MirrorHeartbeatConnector",{"sourceClusterAlias":"primary",'
        b'"targetClusterAlias":"backup"}]')


def test_offset_value_bytes() -> None:
    assert encode_offset(1234) == b'{"offset":1234}'
    assert encode_offset(0) == b'{"offset":0}'
    assert encode_offset(2**63 - 1) == b'{"offset":9223372036854775807}'


@pytest.mark.parametrize("bad", [-1, 2**63, True, 1.0])
def test_encode_offset_rejects_non_offsets(bad: object) -> None:
    with pytest.raises(ValueError):
        encode_offset(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, 2**31, False])
def test_keys_reject_bad_partitions(bad: object) -> None:
    with pytest.raises(ValueError):
        source_offset_key("a", "t", bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        checkpoint_offset_key("g", "t", bad)  # type: ignore[arg-type]


def test_custom_connector_name() -> None:
    assert source_offset_key("a", "t", 1, connector="mm2-a-b") == (
        b'["mm2-a-b",{"cluster":"a","partition":1,"topic":"t"}]')


def test_strings_are_escaped_like_jackson() -> None:
    # Raw UTF-8 for non-ASCII, short escapes where JSON has them, upper-case hex otherwise.
    key = checkpoint_offset_key('g"\\\n\t\x1f\u00e9\u2028/', "t", 0)
    assert key == ('["MirrorCheckpointConnector",{"partition":0,"topic":"t",'
                   '"group":"g\\"\\\\\\n\\t\\u001F\u00e9\u2028/"}]').encode()
    assert json.loads(key)[1]["group"] == 'g"\\\n\t\x1f\u00e9\u2028/'


def test_lone_surrogates_are_refused() -> None:
    with pytest.raises(ValueError):
        source_offset_key("a", "\ud800", 0)


def test_decode_java_written_record() -> None:
    key = b'["MirrorSourceConnector",{"cluster":"primary","partition":0,"topic":"orders"}]'
    progress = decode_source_progress(key, b'{"offset":1234}')
    assert progress == SourceProgress("MirrorSourceConnector", "primary", "orders", 0, 1234)
    assert progress is not None and progress.resume_offset == 1235


def test_decode_tombstone() -> None:
    progress = decode_source_progress(source_offset_key("a", "t", 2), None)
    assert progress == SourceProgress(SOURCE_CONNECTOR, "a", "t", 2, None)
    assert progress is not None and progress.resume_offset is None


@pytest.mark.parametrize("value", [b"null", b"{}", b'{"offset":null}', b'{"offset":-1}'])
def test_values_java_reads_as_no_offset(value: bytes) -> None:
    progress = decode_source_progress(source_offset_key("a", "t", 0), value)
    assert progress is not None
    assert progress.last_offset is None


def test_value_extra_fields_are_ignored() -> None:
    progress = decode_source_progress(source_offset_key("a", "t", 0),
                                      b'{"offset":7,"note":"x"}')
    assert progress is not None and progress.last_offset == 7


def test_decode_accepts_bytes_like() -> None:
    key = bytearray(source_offset_key("a", "t", 0))
    progress = decode_source_progress(memoryview(key), memoryview(encode_offset(5)))
    assert progress is not None and progress.last_offset == 5


@pytest.mark.parametrize("key", [
    None,
    b"",
    b"\xff\xfe",
    b"not json",
    b"[]",
    b'["MirrorSourceConnector"]',
    b'{"cluster":"a","partition":0,"topic":"t"}',
    b'[1,{"cluster":"a","partition":0,"topic":"t"}]',
    b'["MirrorSourceConnector",{"cluster":"a","partition":"0","topic":"t"}]',
    b'["MirrorSourceConnector",{"cluster":"a","partition":0.0,"topic":"t"}]',
    b'["MirrorSourceConnector",{"cluster":"a","partition":true,"topic":"t"}]',
    b'["MirrorSourceConnector",{"cluster":"a","partition":-1,"topic":"t"}]',
    b'["MirrorSourceConnector",{"cluster":"a","partition":2147483648,"topic":"t"}]',
    b'["MirrorSourceConnector",{"cluster":1,"partition":0,"topic":"t"}]',
    b'["MirrorSourceConnector",{"cluster":"a","partition":0,"topic":"t","x":1}]',
    # other connectors' keys
    b'["MirrorCheckpointConnector",{"partition":3,"topic":"primary.orders","group":"g"}]',
    b'["MirrorHeartbeatConnector",{"sourceClusterAlias":"a","targetClusterAlias":"b"}]',
    # non-canonical spellings Java would never look up
    b'["MirrorSourceConnector",{"topic":"t","cluster":"a","partition":0}]',
    b'["MirrorSourceConnector", {"cluster":"a","partition":0,"topic":"t"}]',
    b'["MirrorSourceConnector",{"cluster":"\\u0061","partition":0,"topic":"t"}]',
    b'["MirrorSourceConnector",{"cluster":"a","partition":0,"topic":"t"}] ',
    b"[" * 100_000,
])
def test_decode_rejects_keys_that_are_not_source_progress(key: bytes | None) -> None:
    assert decode_source_progress(key, b'{"offset":1}') is None


@pytest.mark.parametrize("value", [
    b"garbage", b"\xff", b"5", b"[1]", b'{"offset":"10"}', b'{"offset":1.5}',
    b'{"offset":true}', b'{"offset":9223372036854775808}', b"{" * 100_000,
])
def test_decode_rejects_garbage_values(value: bytes) -> None:
    assert decode_source_progress(source_offset_key("a", "t", 0), value) is None


def test_upper_case_hex_escapes_are_canonical() -> None:
    key = source_offset_key("a\x1f", "t", 0)
    assert b'"cluster":"a\\u001F"' in key
    assert decode_source_progress(key, b'{"offset":3}') is not None
    # Lower-case hex is valid JSON but not the bytes Java would look up.
    assert decode_source_progress(key.replace(b"\\u001F", b"\\u001f"), b'{"offset":3}') is None


_NAME = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)


@given(cluster=_NAME, topic=_NAME, partition=st.integers(0, 2**31 - 1),
       offset=st.integers(0, 2**63 - 1), connector=_NAME)
def test_round_trip(cluster: str, topic: str, partition: int, offset: int,
                    connector: str) -> None:
    key = source_offset_key(cluster, topic, partition, connector)
    # Any JSON parser reads the same values back ...
    assert json.loads(key) == [connector, {"cluster": cluster, "partition": partition,
                                           "topic": topic}]
    # ... and our decoder accepts its own canonical form.
    assert decode_source_progress(key, encode_offset(offset)) == SourceProgress(
        connector, cluster, topic, partition, offset)
