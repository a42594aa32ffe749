"""A mirror between two 3-broker Apache Kafka clusters while brokers die and restart.

Both clusters run three combined broker+controller nodes, topics have replication factor 3
and `min.insync.replicas=2`, and every producer (the test's and the mirror's) writes with
`acks=all`. While records flow, the leader of a source partition is SIGKILLed (its
followers take over; the mirror's consumer must move to the new leader), and later every
target broker is restarted one after the other, as an operator's rolling restart does (the
mirror's producer must ride out leader moves without losing or repeating a record). In the
end the target partitions hold exactly the source partitions' records, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from helpers import consume_all, wait_for
from kafka_helpers import create_replicated_topic, partition_leader
from procs import mm2_config, replicator

from mirrorline.dev import kafka
from mirrorline.dev.kafka import LocalKafkaCluster
from mirrorline.kafka.watermarks import high_watermarks, totals

#: Generous: these tests start their own services (and clusters) on a shared 2-core machine.
pytestmark = [pytest.mark.integration, pytest.mark.kafka_only, pytest.mark.timeout(1200)]

PARTITIONS = 2
#: A killed node is fenced (its partitions led elsewhere) and a restarted one may register
#: again once its last heartbeat is older than the broker session: 3 s instead of Kafka's 9,
#: heartbeats every 0.5 s instead of 2, so no wait here is a session running out.
REPLICATED = {"min.insync.replicas": "2", "default.replication.factor": "3",
              "unclean.leader.election.enable": "false",
              "broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}
#: A ceiling for a service, a broker or a catch-up on a loaded 2-core machine; nothing is
#: asserted about the time taken.
CEILING_S = 180.0


@dataclass
class Clusters:
    source: LocalKafkaCluster
    target: LocalKafkaCluster


@pytest.fixture(scope="module")
async def clusters3(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Clusters]:
    root = tmp_path_factory.mktemp("three-node")
    started = await asyncio.gather(*(
        kafka.start_kafka(alias, directory=root / alias, nodes=3, overrides=REPLICATED,
                          ready_timeout=CEILING_S)
        for alias in ("east", "west")), return_exceptions=True)
    running = [c for c in started if isinstance(c, LocalKafkaCluster)]
    holder = Clusters(running[0], running[-1]) if len(running) == 2 else None
    try:
        for result in started:
            if isinstance(result, BaseException):
                raise result
        assert holder is not None
        yield holder
    finally:
        final = [holder.source, holder.target] if holder else running
        await asyncio.gather(*(kafka.stop_kafka(c, timeout=2.0) for c in final))


@contextlib.asynccontextmanager
async def acks_all_producer(bootstrap: str, topic: str) -> AsyncIterator[list[int]]:
    """Numbered records round-robin over the partitions, idempotent and `acks=all`, until
    the block exits; a send that fails (a broker just died) is not retried by hand -- what
    the source holds is what the test compares the target with."""
    sent, stop = [0], asyncio.Event()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                enable_idempotence=True, linger_ms=5,
                                request_timeout_ms=30000, retry_backoff_ms=200)
    await producer.start()

    async def run() -> None:
        while not stop.is_set():
            futures = []
            for _ in range(10):
                n = sent[0]
                futures.append(await producer.send(topic, str(n).encode(),
                                                   partition=n % PARTITIONS))
                sent[0] += 1
            with contextlib.suppress(KafkaError):
                await asyncio.gather(*futures)
            await asyncio.sleep(0.1)

    task = asyncio.create_task(run())
    try:
        yield sent
    finally:
        stop.set()
        await task
        await producer.stop()


async def count(bootstrap: str, topic: str) -> int:
    """Records in `topic` (0 before it exists): the sum of its high watermarks, as nothing
    is ever deleted from it and no transaction writes to it."""
    try:
        ends = await high_watermarks({"bootstrap_servers": bootstrap}, [topic])
    except KafkaError:
        return 0
    return totals(ends).get(topic, 0)


async def fully_replicated(cluster: LocalKafkaCluster) -> bool:
    """Every partition of every topic (internal ones included) has all 3 replicas in sync."""
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        await admin.start()
        topics = await admin.describe_topics()
    except KafkaError:
        return False
    finally:
        await admin.close()
    return all(len(p.get("isr") or []) == 3 and p.get("leader", -1) >= 0
               for t in topics for p in t.get("partitions") or [])


async def test_nothing_is_lost_or_repeated_through_a_leader_kill_and_a_rolling_restart(
        clusters3: Clusters, unique: str, tmp_path: Path) -> None:
    source, target = clusters3.source, clusters3.target
    topic = f"{unique}.payments"
    await create_replicated_topic(source.bootstrap, topic, PARTITIONS, replication=3)
    config = mm2_config({"east": source, "west": target}, {"east->west": {
        "topics": f"{unique}\\..*", "refresh.topics.interval.seconds": "2",
        "replication.factor": "3", "offset-syncs.topic.replication.factor": "3"}})
    remote = f"east.{topic}"
    async with replicator(config, tmp_path, serving=False) as rep:
        await rep.wait_serving(CEILING_S)
        async with acks_all_producer(source.bootstrap, topic):

            async def mirrored_at_least(n: int) -> bool:
                return await count(target.bootstrap, remote) >= n
            await wait_for(lambda: mirrored_at_least(200), CEILING_S,
                           "the mirror never started", interval=0.5)

            # The source partition's leader dies mid-stream; its followers take over.
            leader = await partition_leader(source.bootstrap, topic, 0)
            await kafka.stop_node(source, leader, kill=True)
            mark = await count(source.bootstrap, topic)
            await wait_for(lambda: mirrored_at_least(mark), CEILING_S,
                           "the mirror did not catch up after the source leader was killed",
                           interval=0.5)
            source = await kafka.restart_node(source, leader, ready_timeout=CEILING_S)
            clusters3.source = source
            await wait_for(lambda: fully_replicated(source), CEILING_S,
                           "the restarted source node never caught up", interval=0.5)

            # Every target node is restarted in turn, the next once all replicas are back.
            for node in target.nodes:
                await kafka.stop_node(target, node.node_id)
                target = await kafka.restart_node(target, node.node_id,
                                                  ready_timeout=CEILING_S)
                clusters3.target = target
                await wait_for(partial(fully_replicated, target), CEILING_S,
                               f"target node {node.node_id} never caught up", interval=0.5)
                mark = await count(source.bootstrap, topic)
                await wait_for(partial(mirrored_at_least, mark), CEILING_S,
                               f"the mirror did not catch up after target node "
                               f"{node.node_id} restarted", interval=0.5)

        # The producer stopped: the mirror catches up with everything the source holds.
        source_records = await consume_all(source.bootstrap, topic, timeout=CEILING_S)
        total = sum(len(rs) for rs in source_records.values())
        target_records = await consume_all(target.bootstrap, remote, expected=total,
                                           timeout=CEILING_S)
    assert total >= 200
    for partition, records in source_records.items():
        assert [r.value for r in target_records[partition]] == [r.value for r in records], (
            f"partition {partition} differs")
