"""The data producer is idempotent on Apache Kafka unless the operator says otherwise.

Without idempotence, a produce the client retries after the broker had already written it
lands twice on the target: a rolling restart of the target was enough to repeat five
records in `test_kafka_multibroker`. With it, the broker drops the retry. The rule is the
Java producer's (and so MM2's): on unless `enable.idempotence` is set, or `acks` is set to
something other than all.

What a Kafka operator would check is what the target's brokers know: an idempotent
producer leaves its producer id in the state of every partition it wrote, which
`kafka-transactions.sh describe-producers` lists; a plain producer leaves none.

Tansu refuses aiokafka's InitProducerId: there the default falls back to a plain producer
with a WARNING naming the key, and an explicit `enable.idempotence = true` stops the flow
with that reason instead of copying without it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from helpers import Record, produce, wait_for
from kafka_checks import read_all, ready_topic
from procs import mm2_config, replicator

from mirrorline.dev import kafka
from mirrorline.dev.brokers import LocalBroker
from mirrorline.dev.kafka import LocalKafkaCluster

pytestmark = [pytest.mark.integration]

#: The class behind `kafka-transactions.sh`.
TRANSACTIONS_TOOL = "org.apache.kafka.tools.TransactionsCommand"


async def producer_ids(cluster: LocalKafkaCluster, topic: str, partition: int,
                       tmp: Path) -> list[str]:
    """The producer ids the partition's leader keeps state for (describe-producers)."""
    log_config = kafka.write_log_config(tmp / "tool-log4j2.yaml", tmp / "tool.log")
    proc = await asyncio.create_subprocess_exec(
        *kafka.java_command(TRANSACTIONS_TOOL, "--bootstrap-server", cluster.bootstrap,
                            "describe-producers", "--topic", topic,
                            "--partition", str(partition), log_config=log_config,
                            shared_classes=True),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode(errors="replace")
    lines = [line.split() for line in out.decode().splitlines() if line.strip()]
    assert lines and lines[0][0] == "ProducerId", out.decode()
    return [row[0] for row in lines[1:]]


async def mirror_and_describe(primary: LocalKafkaCluster, backup: LocalKafkaCluster,
                              topic: str, tmp: Path, **producer: str) -> list[str]:
    """Copy 20 records of `topic` with the given target producer settings; the producer
    ids the remote partition then holds."""
    await ready_topic(primary.bootstrap, topic, 1)
    await produce(primary.bootstrap, topic, [Record(b"v%d" % n, partition=0)
                                             for n in range(20)])
    remote = f"primary.{topic}"
    settings = {f"backup.producer.{k.replace('_', '.')}": v for k, v in producer.items()}
    config = mm2_config({"primary": primary, "backup": backup}, {"primary->backup": {
        "topics": topic, "sync.topic.acls.enabled": "false",
        "refresh.topics.interval.seconds": "1"}}) + "".join(
        f"{k} = {v}\n" for k, v in settings.items())

    async def copied() -> bool:
        try:
            records = await read_all(backup.bootstrap, remote, timeout=5)
        except Exception:
            return False
        return len(records.get(0, [])) == 20

    (tmp / topic).mkdir()
    async with replicator(config, tmp / topic):
        await wait_for(copied, 60, f"{remote} never held the 20 records")
    return await producer_ids(backup, remote, 0, tmp)


@pytest.mark.kafka_only
async def test_the_data_producer_is_idempotent_unless_acks_says_otherwise(
        primary: LocalKafkaCluster, backup: LocalKafkaCluster, unique: str,
        tmp_path: Path) -> None:
    # Nothing set: the target keeps the mirror's producer id (the broker dedups retries).
    assert await mirror_and_describe(primary, backup, f"{unique}-dflt", tmp_path)
    # acks=1 set by the operator: no idempotence, as with the Java producer.
    assert await mirror_and_describe(primary, backup, f"{unique}-acks1", tmp_path,
                                     acks="1") == []


@pytest.mark.tansu_only
async def test_a_target_refusing_idempotence_gets_a_plain_producer_unless_it_was_asked_for(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    topic, remote = f"{unique}-plain", f"primary.{unique}-plain"
    await produce(primary.bootstrap, topic, [Record(b"v%d" % n, partition=0)
                                             for n in range(20)])
    flows = {"primary->backup": {"topics": topic, "refresh.topics.interval.seconds": "1"}}
    clusters = {"primary": primary, "backup": backup}

    async def copied() -> bool:
        try:
            return len((await read_all(backup.bootstrap, remote, timeout=5)).get(0, [])) == 20
        except Exception:
            return False

    async with replicator(mm2_config(clusters, flows), tmp_path, name="default") as proc:
        await wait_for(copied, 60, f"{remote} never held the 20 records")
        log = proc.log_path.read_text()
    assert "backup refused an idempotent producer" in log
    assert "backup.producer.enable.idempotence = false" in log

    asked = mm2_config(clusters, flows) + "backup.producer.enable.idempotence = true\n"
    async with replicator(asked, tmp_path, name="asked", serving=False) as proc:
        async def refused() -> bool:
            text = proc.log_path.read_text() if proc.log_path.exists() else ""
            return "backup.producer.enable.idempotence" in text and "refused" in text
        await wait_for(refused, 60, "the explicit setting was not reported")
