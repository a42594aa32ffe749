"""Fresh partition metadata from a consumer.

`AIOKafkaConsumer.topics()` fetches current metadata but does not keep it, and
`partitions_for_topic` answers from whatever the client cached earlier -- so a topic
created after the consumer started stays invisible. This asks the cluster afresh and
answers from that reply: for the named topics only once the process forbids
auto-creation (`kafka.autocreate`, as every service does), else for all topics (a
request that never auto-creates any). The named request is the cheap one: every
service asks every couple of seconds whether its control log still exists, and the
answer for all topics lists every partition of every topic (`__consumer_offsets`'
fifty among them).

A producer has the same blind spot for partitions: aiokafka refreshes its metadata on
its own only every `metadata.max.age.ms` (5 minutes), and refuses a send to a partition
it does not know -- so a remote topic grown since the producer first wrote to it would
stay unwritable that long. `require_partition` refreshes the metadata first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.cluster import ClusterMetadata
from aiokafka.errors import KafkaError

from mirrorline.kafka.autocreate import auto_creation_forbidden


async def partitions_by_topic(consumer: AIOKafkaConsumer,
                              topics: Iterable[str]) -> dict[str, list[int]]:
    """Topic -> its partitions, for those of `topics` the cluster has now (fresh
    metadata); raises a KafkaError when no broker answers."""
    topics = sorted(set(topics))
    client: Any = consumer._client
    if topics and auto_creation_forbidden():
        cluster = ClusterMetadata(metadata_max_age_ms=client._metadata_max_age_ms)
        # A topic the cluster lacks is no error here (aiokafka would log one per ask).
        cluster.need_all_topic_metadata = True
        if not await client._metadata_update(cluster, topics):
            raise KafkaError("Unable to get cluster metadata over all known brokers")
    else:
        cluster = await client.fetch_all_metadata()
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
