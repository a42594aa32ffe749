"""Contender: a plain aiokafka consume -> produce loop, as a competent user would write it.

A group-less consumer assigned to every source partition reads from the beginning with
`getmany`; each partition's records go into producer batches (`create_batch` / `append` /
`send_batch`) carrying key, value, headers and timestamp; the round's batch futures are
awaited before the next `getmany`, so nothing is lost or reordered if a send fails. On a
compressed source topic the consumer decompresses and the producer compresses its batches
again with the source's codec. It runs inside the bench process, so its CPU figure is the
bench process's over the timed window (its finish-line watcher included, a small part).
"""

from __future__ import annotations

import asyncio
import os
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.common import BenchEnv, ProcessCost

BATCH_BYTES = 1024 * 1024


async def run(env: BenchEnv) -> float:
    started = time.perf_counter()
    copier = asyncio.ensure_future(_copy(env))
    try:
        return await env.wait_mirrored(
            started, watch=[copier], cost=ProcessCost([os.getpid()], children=False))
    finally:
        if not copier.done():
            copier.cancel()
        await asyncio.gather(copier, return_exceptions=True)


async def _copy(env: BenchEnv) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=env.source_bootstrap,
        group_id=None,
        enable_auto_commit=False,
        max_partition_fetch_bytes=BATCH_BYTES,
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=env.target_bootstrap, acks="all", max_batch_size=BATCH_BYTES, linger_ms=0,
        compression_type=None if env.codec == "none" else env.codec,
    )
    await consumer.start()
    await producer.start()
    try:
        tps = [TopicPartition(env.source_topic, p) for p in range(env.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        copied = 0
        while copied < env.records:
            rounds = await consumer.getmany(timeout_ms=500)
            pending: list[asyncio.Future[object]] = []
            for tp, records in rounds.items():
                batch = producer.create_batch()
                for record in records:
                    key, value, timestamp = record.key, record.value, record.timestamp
                    headers = list(record.headers)  # consumer gives a tuple, producer wants a list
                    if batch.append(
                        key=key, value=value, timestamp=timestamp, headers=headers
                    ) is None:  # full: ship it, start the next one
                        pending.append(await producer.send_batch(
                            batch, env.target_topic, partition=tp.partition))
                        batch = producer.create_batch()
                        batch.append(key=key, value=value, timestamp=timestamp, headers=headers)
                pending.append(await producer.send_batch(
                    batch, env.target_topic, partition=tp.partition))
                copied += len(records)
            await asyncio.gather(*pending)
    finally:
        await producer.stop()
        await consumer.stop()
