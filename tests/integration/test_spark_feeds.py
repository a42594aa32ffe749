"""One Spark query copies several flows between different clusters: the source reader and
the sink writer of `mirrorline_spark`, run in this process exactly as Spark's Python
workers run them (plan the micro-batch, read each range -- on the batch path the read
task copies it and yields acknowledgements, on the record path chunk rows -- write), on
two real brokers, crossing in both directions at once. Spark itself adds nothing to what
is checked here and runs in test_spark.py and test_spark_run.py."""

from __future__ import annotations

import asyncio
import json
import secrets

import pyarrow as pa
import pytest
from helpers import PAST_MS, Record, consume_all, create_topic, produce, raw_batches
from mirrorline_spark.options import SinkOptions, SourceOptions
from mirrorline_spark.sink import write_batches
from mirrorline_spark.source import KafkaStreamReader

from mirrorline.core.batches import HEADER_SIZE, parse_header
from mirrorline.dev.brokers import LocalBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _micro_batch(options: dict[str, str]) -> list[list[pa.RecordBatch]]:
    """Plan one micro-batch and read each of its Spark partitions."""
    reader = KafkaStreamReader(SourceOptions.parse(options))
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, None)  # type: ignore[arg-type]
        return [list(reader.read(r)) for r in reader.partitions(start, end)]
    finally:
        reader.stop()


@pytest.mark.parametrize("batch_path", ["on", "off"])
async def test_one_query_copies_two_flows_between_two_clusters_in_both_directions(
        primary: LocalBroker, backup: LocalBroker, batch_path: str) -> None:
    """`batch_path` on: the source's batches reach the target as they are (lz4 kept, the
    records sections byte for byte), except the one the range starts inside, which goes as
    records; off: everything goes record by record through librdkafka."""
    tag = secrets.token_hex(3)
    # The same topic name on both clusters: the flows must not mix them up.
    topic = f"feeds{tag}"
    await create_topic(primary.bootstrap, topic, 2)
    await create_topic(backup.bootstrap, topic, 1)
    await produce(primary.bootstrap, topic, [
        Record(f"p{i}".encode(), key=f"k{i}".encode(), partition=i % 2,
               headers=[("h", b"1"), ("h", b"2")] if i == 3 else [],
               timestamp_ms=PAST_MS + i) for i in range(10)], compression="lz4")
    await produce(backup.bootstrap, topic, [Record(None if i == 2 else f"b{i}".encode(),
                                                   key=b"k", partition=0) for i in range(6)])
    feeds = [
        {"kafka": {"bootstrap.servers": primary.bootstrap}, "flow": "p->b",
         "partitions": [[topic, 0, 1], [topic, 1, 0]], "topics": {topic: f"p.{topic}"},
         "batchPath": batch_path},
        {"kafka": {"bootstrap.servers": backup.bootstrap}, "flow": "b->p",
         "partitions": [[topic, 0, 0]], "topics": {topic: f"b.{topic}"},
         "batchPath": batch_path},
    ]
    await create_topic(backup.bootstrap, f"p.{topic}", 2)
    await create_topic(primary.bootstrap, f"b.{topic}", 1)
    # The sink's feed i writes to the cluster the source's feed i does not read.
    targets = [{**feeds[0], "kafka": {"bootstrap.servers": backup.bootstrap}},
               {**feeds[1], "kafka": {"bootstrap.servers": primary.bootstrap}}]
    # One read task per feed at most (as on a Spark of one core): on the batch path p->b's
    # two partitions are copied by one task, one after the other.
    source = {"feeds": json.dumps([{k: f[k] for k in ("kafka", "partitions", "batchPath")}
                                   | {"target": t} for f, t in zip(feeds, targets, strict=True)]),
              "layout": "chunks", "readTasks": "1"}
    sink = SinkOptions.parse({"feeds": json.dumps(targets)})

    tasks = await asyncio.to_thread(_micro_batch, source)
    # The record path reads a Spark partition per Kafka partition, of both feeds.
    assert len(tasks) == (3 if batch_path == "off" else 2)
    # On the batch path the read tasks copy: their rows carry acknowledgements, no record.
    kinds = {p for chunks in tasks for c in chunks for p in c.column("path").to_pylist()}
    assert kinds == ({"records"} if batch_path == "off" else {"acks"})
    acks = [a for chunks in tasks
            for a in await asyncio.to_thread(write_batches, sink, iter(chunks))]

    assert sorted((a.flow, a.partition, a.records) for a in acks) == [
        ("b->p", 0, 6), ("p->b", 0, 4), ("p->b", 1, 5)]  # p->b partition 0 starts at 1
    assert all(a.error is None and a.remote_topic == f"{a.flow[0]}.{topic}" for a in acks)
    forward = await consume_all(backup.bootstrap, f"p.{topic}", expected=9, timeout=30)
    assert [r.value for r in forward[0]] == [b"p2", b"p4", b"p6", b"p8"]
    assert [r.value for r in forward[1]] == [b"p1", b"p3", b"p5", b"p7", b"p9"]
    assert list(forward[1][1].headers) == [("h", b"1"), ("h", b"2")]
    assert [r.timestamp for r in forward[1]] == [PAST_MS + i for i in (1, 3, 5, 7, 9)]
    back = await consume_all(primary.bootstrap, f"b.{topic}", expected=6, timeout=30)
    assert [r.value for r in back[0]] == [b"b0", b"b1", None, b"b3", b"b4", b"b5"]

    # Where each partition's records landed: every one, in order (offset syncs and the
    # offset map are recorded from these runs).
    runs = {(a.flow, a.partition): a.runs for a in acks}
    assert runs[("p->b", 0)] == [(1, 4, 0)] and runs[("p->b", 1)] == [(0, 5, 0)]
    assert runs[("b->p", 0)] == [(0, 6, 0)]
    paths = {(a.flow, a.partition): (a.copy_path, a.copy_path_reason) for a in acks}
    if batch_path == "off":
        assert set(paths.values()) == {("records", "mirrorline.batch.path = off")}
        return
    assert paths == {("p->b", 0): ("records", "resuming inside a source batch"),
                     ("p->b", 1): ("batches", "mirrorline.batch.path = on"),
                     ("b->p", 0): ("batches", "mirrorline.batch.path = on")}
    # Forwarded as they are: the same batches, lz4 kept, records sections byte for byte.
    for cluster, there, remote, partition in ((primary, backup, f"p.{topic}", 1),
                                              (backup, primary, f"b.{topic}", 0)):
        source_batches = [(parse_header(b).codec, b[HEADER_SIZE:])
                          for b in await raw_batches(cluster.bootstrap, topic, partition)]
        assert source_batches == [(parse_header(b).codec, b[HEADER_SIZE:])
                                  for b in await raw_batches(there.bootstrap, remote,
                                                             partition)]
    assert parse_header((await raw_batches(backup.bootstrap, f"p.{topic}", 1))[0]).codec \
        == "lz4"


async def test_a_task_of_several_ranges_stops_only_the_partition_whose_record_is_refused(
        primary: LocalBroker, backup: LocalBroker) -> None:
    """One read task copies three ranges one after another; the target refuses a record
    of the first (larger than its topic takes): that partition stops there, the records
    before it acknowledged, and the task's other two ranges are still copied whole."""
    from mirrorline_spark.copytask import copy_ranges

    topic = f"group{secrets.token_hex(3)}"
    await create_topic(primary.bootstrap, topic, 3)
    await create_topic(backup.bootstrap, f"p.{topic}", 3, {"max.message.bytes": "2000"})
    await produce(primary.bootstrap, topic, [
        Record((b"x" * 5000) if i == 4 else f"v{i}".encode(), partition=i % 3)
        for i in range(12)])  # partition 1: v1, x (offset 1), v7, v10
    target = {"kafka": {"bootstrap.servers": backup.bootstrap}, "flow": "p->b",
              "topics": {topic: f"p.{topic}"}}
    options = SourceOptions.parse({"feeds": json.dumps([{
        "kafka": {"bootstrap.servers": primary.bootstrap}, "batchPath": "on",
        "partitions": [[topic, p, 0] for p in range(3)], "target": target}]),
        "layout": "chunks"})

    def copy() -> list[pa.RecordBatch]:
        ranges = [(topic, 1, 0, 4), (topic, 0, 0, 4), (topic, 2, 0, 4)]
        return list(copy_ranges(options.feeds[0], 0, ranges, stall_s=30))
    rows = await asyncio.to_thread(copy)
    acks = {a.partition: a for a in await asyncio.to_thread(
        write_batches, SinkOptions.parse({"feeds": json.dumps([target])}), iter(rows))}
    assert acks[1].error is not None and "offset 1" in acks[1].error, acks[1].error
    assert acks[1].error.startswith("target rejected the record"), acks[1].error
    assert acks[1].runs == [(0, 1, 0)]
    assert [(acks[p].error, acks[p].runs) for p in (0, 2)] == [(None, [(0, 4, 0)])] * 2
    landed = await consume_all(backup.bootstrap, f"p.{topic}", expected=9, timeout=30)
    assert [r.value for r in landed[1]] == [b"v1"]
    assert [r.value for r in landed[0]] == [f"v{i}".encode() for i in (0, 3, 6, 9)]
    assert [r.value for r in landed[2]] == [f"v{i}".encode() for i in (2, 5, 8, 11)]
