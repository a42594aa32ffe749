"""Helpers for the tests that only Apache Kafka can run (marker `kafka_only`).

Import as `from kafka_checks import ...`. Kafka elects a new partition's leader a moment
after CreateTopics answers, so `ready_topic` waits for every leader before a test produces;
`read_all` reads a topic to its end as a `read_committed` (or `read_uncommitted`) consumer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from helpers import Consumed


async def wait_for_leaders(bootstrap: str, topic: str, partitions: int, *,
                           timeout: float = 30.0, client: Mapping[str, Any] | None = None
                           ) -> None:
    """Until every partition of `topic` has a leader in the cluster's metadata."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **dict(client or {}))
    await consumer.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            cluster = await consumer._client.fetch_all_metadata()
            found = cluster.partitions_for_topic(topic) or set()
            leaders = [cluster.leader_for_partition(TopicPartition(topic, p)) for p in found]
            if len(found) >= partitions and all(x is not None and x >= 0 for x in leaders):
                return
            if loop.time() > deadline:
                raise AssertionError(f"{topic}: no leader for every partition after {timeout}s")
            await asyncio.sleep(0.1)
    finally:
        await consumer.stop()


async def ready_topic(bootstrap: str, name: str, partitions: int = 1,
                      configs: Mapping[str, str] | None = None) -> None:
    """Create `name` (replication factor 1) and wait until each partition has a leader."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1,
                                            topic_configs=dict(configs or {}))])
    finally:
        await admin.close()
    await wait_for_leaders(bootstrap, name, partitions)


async def read_all(bootstrap: str, topic: str, *, isolation: str = "read_committed",
                   timeout: float = 60.0, client: Mapping[str, Any] | None = None,
                   missing_ok: bool = False) -> dict[int, list[Consumed]]:
    """Every record of every partition of `topic` that a consumer with `isolation` reads,
    from the log start to the end (the last stable offset for `read_committed`).
    `missing_ok`: a topic that does not exist (yet) reads as empty instead of failing."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                isolation_level=isolation, fetch_max_wait_ms=100,
                                **dict(client or {}))
    await consumer.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        cluster = await consumer._client.fetch_all_metadata()
        tps = [TopicPartition(topic, p)
               for p in sorted(cluster.partitions_for_topic(topic) or ())]
        if not tps and missing_ok:
            return {}
        assert tps, f"topic {topic!r} does not exist on {bootstrap}"
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)  # the LSO for read_committed
        result: dict[int, list[Consumed]] = {tp.partition: [] for tp in tps}
        while not await _reached(consumer, ends):
            batches = await consumer.getmany(timeout_ms=200)
            for tp, batch in batches.items():
                result[tp.partition].extend(batch)
            if loop.time() > deadline:
                counts = {p: len(rs) for p, rs in result.items()}
                raise AssertionError(f"read_all({topic!r}): not at {ends} after {timeout}s; "
                                     f"read {counts}")
        return result
    finally:
        await consumer.stop()


async def _reached(consumer: AIOKafkaConsumer, ends: Mapping[TopicPartition, int]) -> bool:
    for tp, end in ends.items():
        if await consumer.position(tp) < end:
            return False
    return True


def values(records: Sequence[Consumed]) -> list[bytes | None]:
    return [r.value for r in records]
