"""A fenced worker lets go of a partition whose batch never reached its producer's queue.

Found on Apache Kafka: right after a remote topic is created, the first send of a partition
waits in aiokafka for the topic's metadata. A worker that lost its lease then aborts the
producer, and an aborted producer never ends that wait. The send was not counted as in
flight, so nothing cancelled it, and the partition waited "for its batch in flight" for
good: the worker copied nothing more until restarted (seen in `mirrorline dev demo
--broker kafka` on a loaded machine: half of every topic copied, then a stall).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from helpers import PAST_MS

from mirrorline.dev import kafka
from mirrorline.replicator.delivery import DeliveryLoop
from mirrorline.replicator.pump import PartitionPump
from mirrorline.replicator.sending import abort_sends

pytestmark = [pytest.mark.integration, pytest.mark.kafka_only]


@dataclass
class Rec:
    offset: int
    value: bytes | None
    key: bytes | None = b"k"
    timestamp: int = PAST_MS  # recent: older records fall to the retention check at once
    headers: tuple[tuple[str, bytes], ...] = ()
    topic: str = "orders"
    partition: int = 0


async def create_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()


async def test_a_send_waiting_for_metadata_settles_when_its_producer_is_aborted(
        tmp_path: Path) -> None:
    # A cluster that does not create topics on a metadata request: the remote topic's
    # metadata never comes, as on a broker still propagating a new topic.
    cluster = await kafka.start_kafka(
        "no-auto-create", directory=tmp_path / "kafka",
        overrides={"auto.create.topics.enable": "false"})
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap)
    await producer.start()
    try:
        pump = PartitionPump(flow="a->b", source_topic="orders", target_topic="a.orders",
                             partition=0, next_offset=0)
        pump.offer([Rec(offset, b"v%d" % offset) for offset in range(3)])

        # The flow's fetch is a real consumer's: with nothing to wait for it returns at once.
        await create_topic(cluster.bootstrap, "orders")
        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap)
        await consumer.start()
        consumer.assign([TopicPartition("orders", 0)])

        async def fetch(timeout_ms: int) -> None:
            await consumer.getmany(timeout_ms=timeout_ms)

        delivery = DeliveryLoop(producer, {TopicPartition("orders", 0): pump}, fetch=fetch,
                                on_ack=lambda _pump, _delivered: None)
        copying = asyncio.create_task(delivery.run())
        while not pump.in_flight:  # noqa: ASYNC110 (the pump has no event to wait on)
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)  # the send is waiting for the topic's metadata now

        await abort_sends("a->b", None, delivery, "fenced")  # type: ignore[arg-type]

        # The worker lets go only once the batch settled; before the fix it never did.
        assert await delivery.wait_settled(pump, timeout=30.0), \
            "the partition still waits for a batch its aborted producer will never queue"
        assert not pump.in_flight
        assert pump.next_offset == 0, "nothing was acknowledged, so nothing counts as copied"
        assert "SendAborted" in (pump.error or ""), \
            "an aborted send is an expected failure, not an unexpected producer error"

        # Once a new producer is handed over, the partition copies again:
        # its batch was not lost with the aborted producer.
        await create_topic(cluster.bootstrap, "a.orders")
        replacement = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap)
        await replacement.start()
        try:
            delivery.producer = replacement
            delivery.wake.set()
            async with asyncio.timeout(60):
                while pump.next_offset < 3:  # noqa: ASYNC110 (plain state, no event)
                    await asyncio.sleep(0.05)
            copying.cancel()
            await asyncio.gather(copying, return_exceptions=True)
        finally:
            await replacement.stop()
            await consumer.stop()
    finally:
        await producer.stop()
        await kafka.stop_kafka(cluster)
