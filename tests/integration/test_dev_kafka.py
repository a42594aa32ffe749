"""Apache Kafka clusters from `mirrorline.dev.kafka` and `mirrorline dev brokers --broker kafka`.

These are the clusters the suite, the bench and `dev demo --broker kafka` run on, so the
properties a user relies on are checked here: a cluster answers as the cluster its storage
was formatted for, keeps its topics across `down` and `up`, and the CLI records and stops
every node (three-node clusters losing their leader: `test_kafka_multibroker.py`).
They run whichever broker the rest of the suite uses (Java and `make kafka` are needed).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from helpers import dev_brokers

from mirrorline.dev import kafka
from mirrorline.dev.brokers import free_port, is_alive, load_state, probe

pytestmark = pytest.mark.integration



async def write_and_count(bootstrap: str, topic: str, count: int, *,
                          replication: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, replication)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                enable_idempotence=True)
    await producer.start()
    try:
        for n in range(count):
            await producer.send_and_wait(topic, b"%d" % n, partition=0)
    finally:
        await producer.stop()


async def end_offset(bootstrap: str, topic: str) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        return int((await consumer.end_offsets([tp]))[tp])
    finally:
        await consumer.stop()


async def test_cli_starts_records_restarts_and_stops_an_apache_kafka_cluster(
        state_dir: Path) -> None:
    port = free_port()
    rc, out, err = await dev_brokers(state_dir, "up", "--broker", "kafka", f"east={port}")
    assert rc == 0, err
    assert "east: Apache Kafka" in out and "answering after" in out
    east = load_state(state_dir)["east"]
    assert east.kind == "kafka" and east.bootstrap == f"127.0.0.1:{port}"
    assert await probe(east.bootstrap) == east.cluster_id
    await write_and_count(east.bootstrap, "kept", 5)

    rc, out, err = await dev_brokers(state_dir, "status")
    assert rc == 0, err
    assert "kafka" in out and "yes" in out

    rc, out, err = await dev_brokers(state_dir, "down")
    assert rc == 0, err
    assert not any(is_alive(pid) for pid in east.all_pids)

    # Up again: the same folder, port and cluster id, and the topic is still there.
    rc, out, err = await dev_brokers(state_dir, "up", "--broker", "kafka", f"east={port}")
    assert rc == 0, err
    again = load_state(state_dir)["east"]
    assert again.cluster_id == east.cluster_id and again.port == port
    assert await end_offset(again.bootstrap, "kept") == 5


async def test_cli_refuses_several_nodes_of_tansu(state_dir: Path) -> None:
    rc, _out, err = await dev_brokers(state_dir, "up", "--nodes", "3", "east")
    assert rc == 1
    assert "--nodes needs --broker kafka" in err


async def test_a_node_that_cannot_start_is_reported_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(kafka.BrokerError) as failure:
        await kafka.start_kafka("broken", directory=tmp_path / "broken",
                                overrides={"num.io.threads": "not-a-number"},
                                ready_timeout=60)
    message = str(failure.value)
    assert "cannot format the storage of Kafka node 1" in message
    assert "Invalid value not-a-number for configuration num.io.threads" in message
    assert "\tat " not in message, "the reason, not a Java stack trace"
