"""Numbered test records in and out of a cluster, for drills and demos.

`produce` writes `<topic>-<n>` values round-robin over the partitions (creating the topic
when it is missing); `consume` reads as a member of a consumer group, like an application
would, commits where it stopped and reports what it read -- enough to see by eye that a
failover lost and repeated nothing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from mirrorline.kafka.metadata import partitions_by_topic


async def produce(bootstrap: str, topic: str, count: int, *, partitions: int = 3,
                  start: int = 0) -> int:
    """Write `count` numbered records (numbers from `start`); returns how many were acked."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        await admin.start()
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        await producer.start()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        try:
            await consumer.start()
            found = (await partitions_by_topic(consumer, [topic])).get(topic) or {0}
        finally:
            await consumer.stop()
        targets = sorted(found)
        futures = [await producer.send(topic, f"{topic}-{n}".encode(),
                                       partition=targets[n % len(targets)])
                   for n in range(start, start + count)]
        await asyncio.gather(*futures)
        return len(futures)
    finally:
        await producer.stop()


@dataclass(frozen=True)
class Consumed:
    values: list[str]

    @property
    def distinct(self) -> int:
        return len(set(self.values))


async def consume(bootstrap: str, topics: list[str], group: str, *, limit: int | None = None,
                  quiet_s: float = 3.0, timeout_s: float = 60.0) -> Consumed:
    """Read as `group` until `limit` records or nothing new for `quiet_s`; commit; leave."""
    consumer = AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                session_timeout_ms=10_000, heartbeat_interval_ms=1000)
    try:  # a start that fails still leaves a client to close
        await consumer.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        values: list[str] = []
        last = loop.time()
        while loop.time() - last < quiet_s and loop.time() < deadline:
            room = None if limit is None else limit - len(values)
            if room == 0:
                break
            batches = await consumer.getmany(timeout_ms=500, max_records=room)
            for batch in batches.values():
                values.extend((r.value or b"").decode(errors="replace") for r in batch)
            if batches or not consumer.assignment():
                last = loop.time()
        await consumer.commit()
        return Consumed(values)
    finally:
        await consumer.stop()
