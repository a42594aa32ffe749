"""Fresh partition metadata from a consumer.

`AIOKafkaConsumer.topics()` fetches current metadata but does not keep it, and
`partitions_for_topic` answers from whatever the client cached earlier -- so a topic
created after the consumer started stays invisible. This asks for all topics (a request
that never auto-creates any) and answers from that reply.

A producer has the same blind spot for partitions: aiokafka refreshes its metadata on
its own only every `metadata.max.age.ms` (5 minutes), and refuses a send to a partition
it does not know -- so a remote topic grown since the producer first wrote to it would
stay unwritable that long. `require_partition` refreshes the metadata first.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError


async def partitions_by_topic(consumer: AIOKafkaConsumer,
                              topics: Iterable[str]) -> dict[str, list[int]]:
    cluster = await consumer._client.fetch_all_metadata()
    found: dict[str, list[int]] = {}
    for topic in topics:
        partitions = cluster.partitions_for_topic(topic)
        if partitions:
            found[topic] = sorted(partitions)
    return found


class PartitionNotKnown(KafkaError):  # type: ignore[misc]
    """The target's metadata does not show the partition (yet): retried like any other
    transient Kafka error."""


async def require_partition(producer: AIOKafkaProducer, topic: str, partition: int) -> None:
    """Return once `producer` knows partition `partition` of `topic`, refreshing its
    metadata when it does not; PartitionNotKnown when the cluster does not show it."""
    known = producer.client.cluster.partitions_for_topic(topic)
    if known and partition in known:
        return
    await producer.client.force_metadata_update()
    known = producer.client.cluster.partitions_for_topic(topic)
    if not known or partition not in known:
        raise PartitionNotKnown(
            f"{topic} has {len(known or ())} partition(s) in the target's metadata: "
            f"partition {partition} is not there yet")
