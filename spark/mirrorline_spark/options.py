"""The options the source and the sink take (strings, as Spark passes them)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Records per partition and micro-batch at most: bounds memory and the replay after a
#: crash (a micro-batch that was written but not yet recorded is copied again).
DEFAULT_MAX_RECORDS = 200_000


def _json(options: Mapping[str, str], key: str, default: Any = None) -> Any:
    raw = options.get(key)
    if raw is None:
        if default is None:
            raise ValueError(f"option {key!r} is required")
        return default
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"option {key!r} is not valid JSON: {exc}") from None


@dataclass(frozen=True)
class SourceOptions:
    #: librdkafka settings of the source cluster.
    kafka: dict[str, str]
    #: (topic, partition) -> first offset to read.
    starts: dict[tuple[str, int], int]
    max_records: int
    #: A file whose existence means "plan no more data" (the executor drains the query).
    drain_file: str | None
    #: "records" (a row per record, the default) or "chunks" (see records.CHUNK_SCHEMA_DDL).
    layout: str = "records"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        starts = {(str(t), int(p)): int(o) for t, p, o in _json(options, "partitions")}
        return cls(kafka=dict(_json(options, "kafka")), starts=starts,
                   max_records=int(options.get("maxRecordsPerPartition", DEFAULT_MAX_RECORDS)),
                   drain_file=options.get("drainFile"),
                   layout=parse_layout(options))


@dataclass(frozen=True)
class SinkOptions:
    #: librdkafka settings of the target cluster.
    kafka: dict[str, str]
    #: source topic -> remote topic.
    topics: dict[str, str]
    #: Unix socket of the executor that records what was acknowledged (optional).
    ack_socket: str | None
    #: The flow's name, for errors that name a record (as the replicator's do).
    flow: str = ""

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        return cls(kafka=dict(_json(options, "kafka")), topics=dict(_json(options, "topics")),
                   ack_socket=options.get("ackSocket"), flow=options.get("flow", ""))


def offset_key(topic: str, partition: int) -> str:
    """Micro-batch offsets are {"<partition>:<topic>": next offset} (topics may hold ':')."""
    return f"{partition}:{topic}"


def parse_offset_key(key: str) -> tuple[str, int]:
    partition, _, topic = key.partition(":")
    return topic, int(partition)


def parse_layout(options: Mapping[str, str]) -> str:
    layout = options.get("layout", "records")
    if layout not in ("records", "chunks"):
        raise ValueError(f"option 'layout' must be records or chunks, not {layout!r}")
    return layout
