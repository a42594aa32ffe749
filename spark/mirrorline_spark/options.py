"""The options the source and the sink take (strings, as Spark passes them).

One query can copy from several source clusters to several targets: it has *feeds*, each
one flow's partitions with the source's and the target's client settings. Feed `i` of
the source is feed `i` of the sink; the chunk rows between them carry the index. A query
of one feed may give `kafka`, `partitions` and `topics` directly instead of `feeds`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Records per partition and micro-batch at most: bounds memory and the replay after a
#: crash (a micro-batch that was written but not yet recorded is copied again).
DEFAULT_MAX_RECORDS = 200_000

#: (feed, topic, partition): a source partition of a query.
SourceKey = tuple[int, str, int]
#: (topic, partition, start, end): records [start, end) of a source partition to copy.
Range = tuple[str, int, int, int]


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


def _feeds(options: Mapping[str, str]) -> list[Mapping[str, Any]]:
    """The `feeds` option, or the one feed the top-level options describe."""
    if "feeds" not in options:
        return [{k: _json(options, k) for k in ("kafka", "partitions", "topics")
                 if k in options} | {"flow": options.get("flow", "")}
                | ({"batchPath": options["batchPath"]} if "batchPath" in options else {})]
    feeds = _json(options, "feeds")
    if not isinstance(feeds, list) or not feeds or not all(isinstance(f, dict) for f in feeds):
        raise ValueError("option 'feeds' must be a non-empty JSON list of objects")
    return feeds


def _field(feed: Mapping[str, Any], index: int, key: str) -> Any:
    if key not in feed:
        raise ValueError(f"feed {index}: {key!r} is required")
    return feed[key]


#: `mirrorline.batch.path` values (`mirrorline.core.copy_path.Mode`).
BATCH_PATHS = ("auto", "on", "off")
#: The target producer's `max.request.size` when none is given (Kafka's default).
DEFAULT_MAX_REQUEST_SIZE = 1_048_576


def _batch_path(feed: Mapping[str, Any], index: int) -> str:
    value = str(feed.get("batchPath", "auto"))
    if value not in BATCH_PATHS:
        raise ValueError(f"feed {index}: 'batchPath' must be auto, on or off, not {value!r}")
    return value


def _client(feed: Mapping[str, Any]) -> dict[str, str]:
    """The feed's client settings as Java properties (`client`), for the aiokafka client
    of the batch path; without them, just the bootstrap servers of `kafka`."""
    client = feed.get("client")
    if client is None:
        return {"bootstrap.servers": str(dict(feed.get("kafka") or {}).get(
            "bootstrap.servers", ""))}
    return {str(k): str(v) for k, v in dict(client).items()}


@dataclass(frozen=True)
class SinkFeed:
    #: librdkafka settings of the target cluster.
    kafka: dict[str, str]
    #: source topic -> remote topic.
    topics: dict[str, str]
    #: The flow's name, for errors that name a record (as the replicator's do) and for
    #: the executor to know whose acknowledgements these are.
    flow: str = ""
    #: The flow's `mirrorline.batch.path`: other than "off", the source's read task copies
    #: (`mirrorline_spark.copytask`, raw Produce requests of an aiokafka client of
    #: `client`) and the sink only hands its acknowledgements on.
    batch_path: str = "auto"
    #: The target producer's settings as Java properties (`<target>.producer.*`).
    client: dict[str, str] = field(default_factory=dict)


def _sink_feed(feed: Mapping[str, Any], index: int) -> SinkFeed:
    return SinkFeed(kafka=dict(_field(feed, index, "kafka")),
                    topics=dict(_field(feed, index, "topics")), flow=str(feed.get("flow", "")),
                    batch_path=_batch_path(feed, index), client=_client(feed))


@dataclass(frozen=True)
class SourceFeed:
    #: librdkafka settings of the source cluster.
    kafka: dict[str, str]
    #: (topic, partition) -> first offset to read.
    starts: dict[tuple[str, int], int]
    #: The flow's `mirrorline.batch.path`: other than "off", a `chunks` query reads raw
    #: record batches (`mirrorline_spark.source`) with an aiokafka client of `client`.
    batch_path: str = "auto"
    #: The source consumer's settings as Java properties (`<source>.consumer.*`).
    client: dict[str, str] = field(default_factory=dict)
    #: The target producer's `max.request.size`: a larger batch takes the record path.
    max_batch_bytes: int = DEFAULT_MAX_REQUEST_SIZE
    #: Where the feed's records go (the sink's feed, option `target`): on the batch path
    #: the read task copies what it reads (`mirrorline_spark.copytask`).
    target: SinkFeed | None = None


def _target(feed: Mapping[str, Any], index: int) -> SinkFeed | None:
    target = feed.get("target")
    if target is None:
        return None
    if not isinstance(target, dict):
        raise ValueError(f"feed {index}: 'target' must be a JSON object (the sink's feed)")
    try:
        return _sink_feed(target, index)
    except ValueError as exc:
        raise ValueError(f"{exc} (in 'target')") from None


@dataclass(frozen=True)
class SourceOptions:
    feeds: tuple[SourceFeed, ...]
    max_records: int
    #: A file whose existence means "plan no more data" (the executor drains the query).
    drain_file: str | None
    #: "records" (a row per record, the default) or "chunks" (see records.CHUNK_SCHEMA_DDL).
    layout: str = "records"
    #: Option `readTasks`: into how many read tasks at most a micro-batch groups each
    #: feed's batch-path ranges (the executor's driver gives Spark's default parallelism;
    #: `source.group_ranges`). None: a task per range.
    read_tasks: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        feeds = tuple(
            SourceFeed(kafka=dict(_field(f, i, "kafka")),
                       starts={(str(t), int(p)): int(o)
                               for t, p, o in _field(f, i, "partitions")},
                       batch_path=_batch_path(f, i), client=_client(f),
                       max_batch_bytes=int(f.get("maxBatchBytes", DEFAULT_MAX_REQUEST_SIZE)),
                       target=_target(f, i))
            for i, f in enumerate(_feeds(options)))
        layout = parse_layout(options)
        for i, f in enumerate(feeds):
            if layout == "chunks" and f.batch_path != "off" and f.target is None:
                raise ValueError(f"feed {i}: 'target' is required where 'batchPath' is not "
                                 f"off (the read task copies what it reads)")
        if layout == "records" and len(feeds) > 1:
            raise ValueError("layout 'records' carries no feed: a query of several feeds "
                             "needs layout 'chunks'")
        tasks = options.get("readTasks")
        if tasks is not None and (not tasks.isdigit() or int(tasks) < 1):
            raise ValueError(f"option 'readTasks' must be a whole number of at least 1, "
                             f"not {tasks!r}")
        return cls(feeds=feeds,
                   max_records=int(options.get("maxRecordsPerPartition", DEFAULT_MAX_RECORDS)),
                   drain_file=options.get("drainFile"), layout=layout,
                   read_tasks=int(tasks) if tasks is not None else None)

    @property
    def starts(self) -> dict[SourceKey, int]:
        return {(i, t, p): o for i, feed in enumerate(self.feeds)
                for (t, p), o in feed.starts.items()}


@dataclass(frozen=True)
class SinkOptions:
    feeds: tuple[SinkFeed, ...]

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        return cls(feeds=tuple(_sink_feed(f, i) for i, f in enumerate(_feeds(options))))


def offset_key(feed: int, topic: str, partition: int) -> str:
    """Micro-batch offsets are {"<feed>:<partition>:<topic>": next offset} (topics may
    hold ':')."""
    return f"{feed}:{partition}:{topic}"


def parse_offset_key(key: str) -> SourceKey:
    feed, partition, topic = key.split(":", 2)
    return int(feed), topic, int(partition)


def parse_layout(options: Mapping[str, str]) -> str:
    layout = options.get("layout", "records")
    if layout not in ("records", "chunks"):
        raise ValueError(f"option 'layout' must be records or chunks, not {layout!r}")
    return layout
