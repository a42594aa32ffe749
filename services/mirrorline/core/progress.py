"""Replication progress in Kafka Connect's source-offset format (MM2's MirrorUtils).

Java MM2 (dedicated mode) keeps each source task's position in ``mm2-offsets.<source>.internal``
on the target cluster, as Connect source offsets: key ``[<connector>, <partition map>]`` and
value ``{"offset": N}``, both compact JSON.  Mirrorline stores its progress in the same records,
so a deployment can switch between Java MM2 and Mirrorline in either direction without
copying any partition again.

What the stored number means: it is the offset of the **last replicated** upstream record,
not the next one to read.  A restart therefore resumes at ``last_offset + 1``; with nothing
stored (or a negative value, which Java MM2 also ignores) the consumer's
``auto.offset.reset`` decides.

Connect finds a stored offset by the exact bytes of its key, so keys here are byte-identical
to what Jackson writes: no spaces, the map keys in the order Java's HashMap iterates them
(``cluster, partition, topic`` for the source connector), non-ASCII characters as raw UTF-8,
and control characters escaped with upper-case hex.  For the same reason decoding accepts
only keys in that canonical form: a record under any other spelling of the key is invisible
to Java MM2, so it must be invisible to Mirrorline too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

__all__ = [
    "CHECKPOINT_CONNECTOR",
    "HEARTBEAT_CONNECTOR",
    "SOURCE_CONNECTOR",
    "SourceProgress",
    "checkpoint_offset_key",
    "decode_source_progress",
    "encode_offset",
    "heartbeat_offset_key",
    "progress_problem",
    "progress_topic",
    "source_offset_key",
]

#: Default connector names in dedicated mode (the connector classes' simple names).
SOURCE_CONNECTOR: Final = "MirrorSourceConnector"
CHECKPOINT_CONNECTOR: Final = "MirrorCheckpointConnector"
HEARTBEAT_CONNECTOR: Final = "MirrorHeartbeatConnector"

_INT32_MAX: Final = 2**31 - 1
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1

RawBytes: TypeAlias = bytes | bytearray | memoryview
_JsonScalar: TypeAlias = str | int

# Jackson's short escapes; every other control character becomes \\u00XX (upper-case hex).
_SHORT_ESCAPES: Final = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n",
                         "\f": "\\f", "\r": "\\r"}


def progress_topic(source_alias: str) -> str:
    """The Connect offsets topic of the flows from `source_alias` (lives on the target)."""
    return f"mm2-offsets.{source_alias}.internal"


def _json_string(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif ch < " ":
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _json_scalar(value: _JsonScalar) -> str:
    return _json_string(value) if isinstance(value, str) else str(value)


def _check_partition(partition: int) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int) \
            or not 0 <= partition <= _INT32_MAX:
        raise ValueError(f"partition must be an int in [0, 2^31-1], not {partition!r}")
    return partition


def _connect_key(connector: str, fields: Sequence[tuple[str, _JsonScalar]]) -> bytes:
    """``[connector,{fields...}]`` exactly as Connect's JSON converter writes it.

    Raises ValueError (UnicodeEncodeError) for lone surrogates, which Jackson refuses too.
    """
    body = ",".join(f"{_json_string(k)}:{_json_scalar(v)}" for k, v in fields)
    return f"[{_json_string(connector)},{{{body}}}]".encode()


def source_offset_key(source_alias: str, topic: str, partition: int,
                      connector: str = SOURCE_CONNECTOR) -> bytes:
    """Key of one upstream partition's progress; `topic` is the *upstream* name."""
    return _connect_key(connector, (("cluster", source_alias),
                                    ("partition", _check_partition(partition)),
                                    ("topic", topic)))


def checkpoint_offset_key(group: str, topic: str, partition: int,
                          connector: str = CHECKPOINT_CONNECTOR) -> bytes:
    """Key the checkpoint connector writes per (group, *downstream* partition)."""
    return _connect_key(connector, (("partition", _check_partition(partition)),
                                    ("topic", topic), ("group", group)))


def heartbeat_offset_key(source_alias: str, target_alias: str,
                         connector: str = HEARTBEAT_CONNECTOR) -> bytes:
    """Key the heartbeat connector writes per flow."""
    return _connect_key(connector, (("sourceClusterAlias", source_alias),
                                    ("targetClusterAlias", target_alias)))


def encode_offset(last_replicated_offset: int) -> bytes:
    """Value for a progress record: the offset of the last replicated upstream record.

    The checkpoint and heartbeat connectors store a meaningless ``encode_offset(0)``.
    """
    if isinstance(last_replicated_offset, bool) or not isinstance(last_replicated_offset, int) \
            or not 0 <= last_replicated_offset <= _INT64_MAX:
        raise ValueError(f"offset must be a non-negative int64, not {last_replicated_offset!r}")
    return f'{{"offset":{last_replicated_offset}}}'.encode()


@dataclass(frozen=True)
class SourceProgress:
    """One decoded progress record of a source connector."""

    connector: str
    cluster: str
    topic: str
    partition: int
    #: Last replicated upstream offset (resume at +1); None when the record says "no
    #: progress": a tombstone, or a value Java MM2 reads as absent (null, no "offset", < 0).
    last_offset: int | None

    @property
    def resume_offset(self) -> int | None:
        """Where replication continues, or None to let `auto.offset.reset` decide."""
        return None if self.last_offset is None else self.last_offset + 1


def _loads(raw: RawBytes) -> object:
    """Parse JSON; raises ValueError/RecursionError on anything that is not."""
    return json.loads(bytes(raw).decode("utf-8"))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _decode_offset(value: RawBytes | None) -> tuple[bool, int | None]:
    """``(decodable, offset)``; offset None means "no progress" (what Java reads as absent)."""
    if value is None:
        return True, None
    try:
        doc = _loads(value)
    except (ValueError, RecursionError):
        return False, None
    if doc is None:
        return True, None
    if not isinstance(doc, dict):
        return False, None
    offset = doc.get("offset")
    if offset is None:
        return True, None
    if not isinstance(offset, int) or isinstance(offset, bool) \
            or not _INT64_MIN <= offset <= _INT64_MAX:
        return False, None
    return True, (offset if offset >= 0 else None)


def decode_source_progress(key: RawBytes | None,
                           value: RawBytes | None) -> SourceProgress | None:
    """Decode one record of the offsets topic, or None when it is not usable progress.

    None covers: keys of other connectors' shapes (checkpoint, heartbeat), non-canonical or
    undecodable keys, and values that do not decode to an offset.  Never raises.
    """
    if key is None:
        return None
    try:
        doc = _loads(key)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, list) or len(doc) != 2:
        return None
    connector, fields = doc
    if not isinstance(connector, str) or not isinstance(fields, dict) \
            or set(fields) != {"cluster", "partition", "topic"}:
        return None
    cluster, topic, partition = fields["cluster"], fields["topic"], fields["partition"]
    if not isinstance(cluster, str) or not isinstance(topic, str) or not _is_int(partition):
        return None
    try:
        canonical = source_offset_key(cluster, topic, partition, connector)
    except ValueError:
        return None
    if canonical != bytes(key):
        return None
    decodable, offset = _decode_offset(value)
    if not decodable:
        return None
    return SourceProgress(connector=connector, cluster=cluster, topic=topic,
                          partition=partition, last_offset=offset)


def progress_problem(key: RawBytes | None, value: RawBytes | None) -> str | None:
    """Why a record of the offsets topic is bad, or None when it is usable progress or
    another connector's record (heartbeat and checkpoint connectors share the topic)."""
    if key is None:
        return "the record has no key"
    try:
        doc = _loads(key)
    except (ValueError, RecursionError):
        return "the key is not JSON"
    if not isinstance(doc, list) or len(doc) != 2 or not isinstance(doc[0], str):
        return "the key is not a [connector, partition] pair"
    if doc[0] == SOURCE_CONNECTOR and decode_source_progress(key, value) is None:
        return "not a valid MirrorSourceConnector progress record (key or offset)"
    return None
