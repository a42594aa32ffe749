"""The audit's verification rate on the benchmark's records, per core.

The heartbeat service's audit reads every mirrored record twice -- once on the source,
once on the target -- and folds each into its window's count and checksum. This runs
that same per-record work (`mirrorline.core.record_audit`) over the benchmark topic as an
aiokafka reader would, and divides the records by the CPU seconds this process used:
records verified per second per core. The goal is to keep up with the replicator's rate
on one core or less.
"""

from __future__ import annotations

import time

from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.common import BenchEnv
from mirrorline.core import record_audit as audit

WINDOW_MS = 60_000


async def verify_rate(bootstrap: str, topic: str, partitions: int, records: int
                      ) -> tuple[float, float]:
    """(records per CPU second, records per wall second) of reading and summarising
    `records` records of `topic`."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_wait_ms=100,
                                max_partition_fetch_bytes=4 * 1024 * 1024)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deltas: dict[TopicPartition, dict[str, list[int]]] = {tp: {} for tp in tps}
        seen = 0
        cpu, wall = time.process_time(), time.perf_counter()
        while seen < records:
            batches = await consumer.getmany(timeout_ms=500, max_records=20_000)
            for tp, batch in batches.items():
                d = deltas[tp]
                for r in batch:
                    audit.accumulate(d, r.timestamp, audit.record_digest(
                        r.key, r.value, r.headers, r.timestamp), WINDOW_MS)
                seen += len(batch)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        return seen / cpu, seen / wall
    finally:
        await consumer.stop()


async def run(env: BenchEnv) -> tuple[float, float]:
    """Verify the target side of a finished mirror run (the source side costs the same)."""
    return await verify_rate(env.target_bootstrap, env.target_topic, env.partitions,
                             env.records)
