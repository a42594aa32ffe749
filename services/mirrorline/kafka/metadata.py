"""Fresh partition metadata from a consumer.

`AIOKafkaConsumer.topics()` fetches current metadata but does not keep it, and
`partitions_for_topic` answers from whatever the client cached earlier -- so a topic
created after the consumer started stays invisible. This asks for all topics (a request
that never auto-creates any) and answers from that reply.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer


async def partitions_by_topic(consumer: AIOKafkaConsumer,
                              topics: Iterable[str]) -> dict[str, list[int]]:
    cluster = await consumer._client.fetch_all_metadata()
    found: dict[str, list[int]] = {}
    for topic in topics:
        partitions = cluster.partitions_for_topic(topic)
        if partitions:
            found[topic] = sorted(partitions)
    return found
