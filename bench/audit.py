"""The audit's verification rate on the benchmark's records, per core.

The heartbeat service's audit reads every mirrored record twice -- once on the source,
once on the target -- and folds each into its window's count and checksum. This runs
that same per-record work over the benchmark topic as the audit reader does it (raw
fetches, `mirrorline.kafka.rawrecords.decode`, `mirrorline.core.record_audit.fold_records`)
and divides the records by the CPU seconds this process used: records verified per
second per core. The goal is to keep up with the replicator's rate on one core or less.

`consumer_rate` measures the audit's earlier reading for comparison: an aiokafka
consumer's records, each digested (`record_digest`) and folded (`accumulate`) on its own.
Both give the same sums (checked).
"""

from __future__ import annotations

import time

from aiokafka import AIOKafkaClient, AIOKafkaConsumer, TopicPartition

from bench.common import BenchEnv
from mirrorline.core import record_audit as audit
from mirrorline.kafka.rawbatches import RawBatches
from mirrorline.kafka.rawrecords import decode

WINDOW_MS = 60_000


async def verify_rate(bootstrap: str, topic: str, partitions: int, records: int
                      ) -> tuple[float, float, dict[int, dict[str, list[int]]]]:
    """(records per CPU second, records per wall second, sums per partition) of reading
    and summarising `records` records of `topic` as the audit reader does."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        raw = RawBatches(client)
        positions = {TopicPartition(topic, p): 0 for p in range(partitions)}
        deltas: dict[int, dict[str, list[int]]] = {p: {} for p in range(partitions)}
        seen = 0
        cpu, wall = time.process_time(), time.perf_counter()
        while seen < records:
            fetched = await raw.fetch(positions, max_wait_ms=100)
            for tp, part in fetched.items():
                part.check(tp)
                decoded = decode(part.records, positions[tp], where=str(tp))
                positions[tp] = decoded.next_offset
                d = deltas[tp.partition]
                for batch in decoded.batches:
                    seen += audit.fold_records(d, batch, WINDOW_MS)[0]
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        return seen / cpu, seen / wall, deltas
    finally:
        await client.close()


async def consumer_rate(bootstrap: str, topic: str, partitions: int, records: int
                        ) -> tuple[float, float, dict[int, dict[str, list[int]]]]:
    """As `verify_rate`, the way the audit read before: a consumer, record by record."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_wait_ms=100,
                                max_partition_fetch_bytes=4 * 1024 * 1024)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deltas: dict[int, dict[str, list[int]]] = {p: {} for p in range(partitions)}
        seen = 0
        cpu, wall = time.process_time(), time.perf_counter()
        while seen < records:
            batches = await consumer.getmany(timeout_ms=500, max_records=20_000)
            for tp, batch in batches.items():
                d = deltas[tp.partition]
                for r in batch:
                    audit.accumulate(d, r.timestamp, audit.record_digest(
                        r.key, r.value, r.headers, r.timestamp), WINDOW_MS)
                seen += len(batch)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        return seen / cpu, seen / wall, deltas
    finally:
        await consumer.stop()


async def run(env: BenchEnv) -> tuple[float, float, float]:
    """Verify the target side of a finished mirror run (the source side costs the same):
    (records per CPU second, per wall second, and per CPU second the earlier way)."""
    args = (env.target_bootstrap, env.target_topic, env.partitions, env.records)
    per_core, per_wall, sums = await verify_rate(*args)
    before, _, sums_before = await consumer_rate(*args)
    if sums != sums_before:
        raise RuntimeError("the audit's batch fold and its record-by-record fold disagree")
    return per_core, per_wall, before
