"""Byte-exact codecs for the records on MM2's internal topics (MM2's Heartbeat,
Checkpoint and OffsetSync classes).

Java MM2 writes these records with Kafka's classic protocol ``Struct`` encoding: big-endian
fixed-width integers and INT16-length-prefixed UTF-8 strings, concatenated in schema order with
no framing.  Mirrorline must read topics written by Java MM2 and vice versa, so both directions
follow the Java reader/writer exactly, including its leniencies:

* trailing bytes after the last field are ignored (the Java reader never checks for them);
* malformed UTF-8 is decoded with U+FFFD replacement characters, as Java's decoder does;
* the INT16 ``version`` header of heartbeat and checkpoint values is read but **any** version is
  then parsed with the version-0 body layout.  Java only ``assert``s version 0, and assertions are
  off in production, so a real MM2 consumer accepts other versions this way; doing the same keeps
  Mirrorline's view of a mixed-version topic identical to Java's.  Encoding always writes 0.

Strings are encoded the way Java's ``String.getBytes(UTF_8)`` does: characters that cannot be
represented (lone surrogates) become ``?``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final, Self, TypeAlias

from mirrorline.core.errors import WireFormatError

__all__ = [
    "VERSION",
    "Checkpoint",
    "Heartbeat",
    "OffsetSync",
    "RawBytes",
]

#: The version written into heartbeat/checkpoint value headers.
VERSION: Final = 0

#: What ``decode`` accepts.  ``None`` stands for a Kafka null key/value and is rejected.
RawBytes: TypeAlias = bytes | bytearray | memoryview

_MAX_STRING_BYTES: Final = 32767
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_INT64: Final = struct.Struct(">q")


# --------------------------------------------------------------------------------------------
# Encoding helpers


def _encode_string(field: str, value: str) -> bytes:
    if not isinstance(value, str):
        # STRING is not nullable in the schema; Java fails the write the same way.
        raise ValueError(f"field {field!r} must be a string, got {type(value).__name__}")
    data = value.encode("utf-8", errors="replace")
    if len(data) > _MAX_STRING_BYTES:
        raise ValueError(
            f"field {field!r} is {len(data)} UTF-8 bytes long; the maximum is {_MAX_STRING_BYTES}"
        )
    return _INT16.pack(len(data)) + data


def _encode_int(field: str, codec: struct.Struct, value: int) -> bytes:
    try:
        return codec.pack(value)
    except struct.error as exc:
        bits = codec.size * 8
        raise ValueError(
            f"field {field!r} = {value!r} is not a signed {bits}-bit integer"
        ) from exc


# --------------------------------------------------------------------------------------------
# Decoding


class _Reader:
    """Sequential reader over one buffer; every failure names the field being read."""

    __slots__ = ("_buf", "_pos", "_what")

    def __init__(self, what: str, data: RawBytes | None) -> None:
        if data is None:
            raise WireFormatError(f"{what} is null")
        self._buf = data if isinstance(data, bytes) else bytes(data)
        self._pos = 0
        self._what = what

    def _fixed(self, field: str, codec: struct.Struct) -> int:
        end = self._pos + codec.size
        if end > len(self._buf):
            raise WireFormatError(
                f"{self._what}: field {field!r} needs {codec.size} bytes at offset {self._pos}, "
                f"only {len(self._buf) - self._pos} left"
            )
        (value,) = codec.unpack_from(self._buf, self._pos)
        self._pos = end
        return int(value)

    def int16(self, field: str) -> int:
        return self._fixed(field, _INT16)

    def int32(self, field: str) -> int:
        return self._fixed(field, _INT32)

    def int64(self, field: str) -> int:
        return self._fixed(field, _INT64)

    def string(self, field: str) -> str:
        length = self._fixed(field, _INT16)
        if length < 0:
            raise WireFormatError(f"{self._what}: field {field!r} has negative length {length}")
        end = self._pos + length
        if end > len(self._buf):
            raise WireFormatError(
                f"{self._what}: field {field!r} declares {length} bytes at offset {self._pos}, "
                f"only {len(self._buf) - self._pos} left"
            )
        text = self._buf[self._pos:end].decode("utf-8", errors="replace")
        self._pos = end
        return text


# --------------------------------------------------------------------------------------------
# Records


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A record of the ``heartbeats`` topic (MM2's ``Heartbeat``)."""

    source_alias: str
    target_alias: str
    timestamp: int

    def encode_key(self) -> bytes:
        return _encode_string("sourceClusterAlias", self.source_alias) + _encode_string(
            "targetClusterAlias", self.target_alias
        )

    def encode_value(self) -> bytes:
        return _INT16.pack(VERSION) + _encode_int("timestamp", _INT64, self.timestamp)

    @classmethod
    def decode(cls, key: RawBytes | None, value: RawBytes | None) -> Self:
        k = _Reader("heartbeat key", key)
        source = k.string("sourceClusterAlias")
        target = k.string("targetClusterAlias")
        v = _Reader("heartbeat value", value)
        v.int16("version")  # any version is parsed with the v0 layout, like Java
        return cls(source, target, v.int64("timestamp"))

    def __str__(self) -> str:
        return (
            f"Heartbeat{{sourceClusterAlias={self.source_alias}, "
            f"targetClusterAlias={self.target_alias}, timestamp={self.timestamp}}}"
        )


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A record of ``<source>.checkpoints.internal`` (MM2's ``Checkpoint``).

    ``topic`` is the *downstream* (renamed) topic; ``partition`` is the same on both sides.
    """

    group: str
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    @property
    def topic_partition(self) -> tuple[str, int]:
        """The downstream ``(topic, partition)`` this checkpoint is about."""
        return (self.topic, self.partition)

    def encode_key(self) -> bytes:
        return (
            _encode_string("group", self.group)
            + _encode_string("topic", self.topic)
            + _encode_int("partition", _INT32, self.partition)
        )

    def encode_value(self) -> bytes:
        return (
            _INT16.pack(VERSION)
            + _encode_int("upstreamOffset", _INT64, self.upstream_offset)
            + _encode_int("offset", _INT64, self.downstream_offset)
            + _encode_string("metadata", self.metadata)
        )

    @classmethod
    def decode(cls, key: RawBytes | None, value: RawBytes | None) -> Self:
        k = _Reader("checkpoint key", key)
        group = k.string("group")
        topic = k.string("topic")
        partition = k.int32("partition")
        v = _Reader("checkpoint value", value)
        v.int16("version")  # any version is parsed with the v0 layout, like Java
        upstream = v.int64("upstreamOffset")
        downstream = v.int64("offset")
        metadata = v.string("metadata")
        return cls(group, topic, partition, upstream, downstream, metadata)

    def __str__(self) -> str:
        return (
            f"Checkpoint{{consumerGroupId={self.group}, "
            f"topicPartition={self.topic}-{self.partition}, "
            f"upstreamOffset={self.upstream_offset}, downstreamOffset={self.downstream_offset}, "
            f"metadata={self.metadata}}}"
        )


@dataclass(frozen=True, slots=True)
class OffsetSync:
    """A record of the offset-syncs topic (MM2's ``OffsetSync``); ``topic`` is the *upstream* topic.

    Value equality is provided for convenience, but the offset-sync store deliberately compares
    instances by identity (``is``): two syncs with equal fields read from two records are distinct
    entries of its history.
    """

    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int

    @property
    def topic_partition(self) -> tuple[str, int]:
        """The upstream ``(topic, partition)`` this sync is about."""
        return (self.topic, self.partition)

    def encode_key(self) -> bytes:
        return _encode_string("topic", self.topic) + _encode_int(
            "partition", _INT32, self.partition
        )

    def encode_value(self) -> bytes:
        # No version header on this topic.
        return _encode_int("upstreamOffset", _INT64, self.upstream_offset) + _encode_int(
            "offset", _INT64, self.downstream_offset
        )

    @classmethod
    def decode(cls, key: RawBytes | None, value: RawBytes | None) -> Self:
        k = _Reader("offset sync key", key)
        topic = k.string("topic")
        partition = k.int32("partition")
        v = _Reader("offset sync value", value)
        upstream = v.int64("upstreamOffset")
        downstream = v.int64("offset")
        return cls(topic, partition, upstream, downstream)

    def __str__(self) -> str:
        return (
            f"OffsetSync{{topicPartition={self.topic}-{self.partition}, "
            f"upstreamOffset={self.upstream_offset}, downstreamOffset={self.downstream_offset}}}"
        )


def valid_sync(key: RawBytes | None, value: RawBytes | None) -> OffsetSync:
    """Decode an offset sync and refuse one that cannot be true (a negative partition or
    offset): for a reader, an impossible record is as bad as one that does not decode."""
    sync = OffsetSync.decode(key, value)
    if sync.partition < 0 or sync.upstream_offset < 0 or sync.downstream_offset < 0:
        raise WireFormatError(f"impossible offset sync {sync}")
    return sync
