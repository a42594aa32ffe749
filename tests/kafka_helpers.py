"""Helpers for tests that start Apache Kafka clusters of their own (`kafka_only` tests).

Import as `from kafka_helpers import ...`. A module of such tests starts its clusters in a
module-scoped fixture with `mirrorline.dev.kafka.start_kafka` (three nodes, TLS listeners,
SCRAM users: what the session's shared one-node clusters do not have) and stops them at the
end of the module.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic


async def create_replicated_topic(bootstrap: str, name: str, partitions: int = 1, *,
                                  replication: int = 1,
                                  configs: Mapping[str, str] | None = None,
                                  timeout: float = 30.0) -> None:
    """Create `name` and return once every partition has a leader and its full ISR.

    Kafka answers CreateTopics before the leaders are elected everywhere; a produce right
    after it can meet NotLeaderForPartition, so wait until metadata shows them.
    """
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(name, partitions, replication, topic_configs=dict(configs or {}))])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not _ready(await admin.describe_topics([name]), partitions, replication):
            if loop.time() > deadline:
                raise AssertionError(f"topic {name!r} has no leader or full ISR after "
                                     f"{timeout:g}s")
            await asyncio.sleep(0.2)
    finally:
        await admin.close()


def _ready(described: list[Any], partitions: int, replication: int) -> bool:
    if not described or described[0].get("error_code"):
        return False
    found = described[0].get("partitions") or []
    return len(found) == partitions and all(
        p.get("error_code", 0) == 0 and p.get("leader", -1) >= 0
        and len(p.get("isr") or []) >= replication for p in found)


async def partition_leader(bootstrap: str, topic: str, partition: int) -> int:
    """The node id leading `topic`-`partition` now."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    for p in described[0]["partitions"]:
        if p["partition"] == partition:
            leader: int = p["leader"]
            return leader
    raise AssertionError(f"{topic}-{partition} not found")
