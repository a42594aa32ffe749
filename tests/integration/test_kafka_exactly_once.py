"""Exactly-once mode (KIP-618 transactions) on Apache Kafka, with real replicator processes.

The flow asks for `exactly.once.support = required`, so every round of copies, with its
progress, is one transaction on the target. A `read_committed` consumer of the remote
topic must see every source record exactly once, in order, whatever SIGKILLs hit the
replicator mid-round, and never a record of a round the next replicator aborted. A
transactional source with aborted transactions, read `read_committed`, must reach the
target without a single aborted record.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from helpers import shape, wait_for
from kafka_checks import read_all, ready_topic
from procs import mm2_config, replicator

from mirrorline.dev.kafka import LocalKafkaCluster
from mirrorline.kafka.watermarks import high_watermarks, totals

pytestmark = [pytest.mark.integration, pytest.mark.kafka_only]

PARTITIONS = 2
BURST = 4000  # records per partition per round


def numbered(n: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    return str(n).encode(), str(n).encode().rjust(80, b"."), [("n", str(n).encode())]


async def burst(bootstrap: str, topic: str, start: int, per_partition: int) -> int:
    """Produce `per_partition` numbered records to every partition in small batches."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=2048)
    await producer.start()
    try:
        n, futures = start, []
        for p in range(PARTITIONS):
            for _ in range(per_partition):
                key, value, headers = numbered(n)
                futures.append(await producer.send(topic, value, key=key, headers=headers,
                                                   partition=p))
                n += 1
        await asyncio.gather(*futures)
        return n
    finally:
        await producer.stop()


async def end_total(cluster: LocalKafkaCluster, topic: str) -> int:
    return totals(await high_watermarks({"bootstrap_servers": cluster.bootstrap}, [topic])
                  ).get(topic, 0)


async def committed_total(cluster: LocalKafkaCluster, topic: str) -> int:
    """Records a read_committed reader sees on `topic` (0 before the replicator made it)."""
    return sum(len(rs) for rs in (await read_all(cluster.bootstrap, topic,
                                                 missing_ok=True)).values())


async def open_round(cluster: LocalKafkaCluster, topic: str) -> bool:
    """Whether `topic` holds records a read_committed reader does not see, still a second
    later (before any round was aborted: afterwards those records count too)."""
    for wait in (0.0, 1.0):
        await asyncio.sleep(wait)
        uncommitted = sum(len(rs) for rs in (await read_all(
            cluster.bootstrap, topic, isolation="read_uncommitted", missing_ok=True)).values())
        if uncommitted == await committed_total(cluster, topic):
            return False
    return True


async def aborted_records(cluster: LocalKafkaCluster, topic: str) -> int:
    """Records below the last stable offset a read_committed reader does not see: rounds the
    transaction coordinator aborted. Below that offset every transaction is decided, so a
    round still open, or one whose commit markers are on their way, does not count."""
    consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap,
                                isolation_level="read_committed")
    await consumer.start()
    try:
        stable = await consumer.end_offsets(
            [TopicPartition(topic, p) for p in range(PARTITIONS)])
    finally:
        await consumer.stop()
    committed = await read_all(cluster.bootstrap, topic, missing_ok=True)
    everything = await read_all(cluster.bootstrap, topic, isolation="read_uncommitted",
                                missing_ok=True)

    def below(records: dict[int, list[Any]], p: int) -> int:
        return sum(1 for r in records.get(p, []) if r.offset < stable[TopicPartition(topic, p)])
    return sum(below(everything, p) - below(committed, p) for p in range(PARTITIONS))


def eos_config(primary: LocalKafkaCluster, backup: LocalKafkaCluster, topic: str,
               unique: str, **extra: str) -> str:
    return mm2_config({"primary": primary, "backup": backup}, {"primary->backup": {
        "topics": topic, "refresh.topics.interval.seconds": "2",
        "exactly.once.support": "required", **extra}},
        mirrorline_deployment=unique)


async def test_read_committed_sees_each_record_once_through_repeated_sigkills(
        primary: LocalKafkaCluster, backup: LocalKafkaCluster, unique: str,
        tmp_path: Path) -> None:
    topic, remote = f"{unique}-eos", f"primary.{unique}-eos"
    await ready_topic(primary.bootstrap, topic, PARTITIONS)
    # Small fetches spread each burst's copy over many rounds, so a kill lands mid-round.
    config = eos_config(primary, backup, topic, unique) + \
        "primary.consumer.max.partition.fetch.bytes = 4096\n"
    produced = 0
    # At least two kills, and more (up to six) until one has left a round the next
    # replicator aborted: on a quiet machine a kill can fall between two rounds, or after a
    # round's commit was sent, and the test needs one aborted round behind to check
    # isolation against (checked below).
    for round_ in range(6):
        before = await end_total(backup, remote) if round_ else 0
        async with replicator(config, tmp_path, name=f"r{round_}") as proc:
            producing = asyncio.create_task(burst(primary.bootstrap, topic, produced, BURST))

            async def copying(before: int = before) -> bool:
                return await end_total(backup, remote) > before + 1500
            await wait_for(copying, 60, f"{remote} did not grow", interval=0.05)
            # Copying, this replicator has initialised its transactional producer, which
            # settled the round the last kill left open: committed, or aborted for good.
            aborted = round_ >= 1 and await aborted_records(backup, remote) > 0
            # Kill it while a round stays open: frozen, it cannot send that round's commit,
            # so records a read_committed reader still does not see a second later belong
            # to a round whose commit the coordinator never got (one it got lands in
            # milliseconds). Its abort is confirmed next round, from the log itself.
            for _ in range(20):
                await proc.signal(signal.SIGSTOP)
                if not aborted and await open_round(backup, remote):
                    break
                await proc.signal(signal.SIGCONT)
                await asyncio.sleep(0.02)
            await proc.signal(signal.SIGKILL)
            assert await proc.wait() == -signal.SIGKILL
            produced = await producing
        if aborted:
            break
    async with replicator(config, tmp_path, name="last") as proc:
        async def complete() -> bool:
            return await committed_total(backup, remote) >= produced
        await wait_for(complete, 120, f"{remote} never held {produced} committed records",
                       interval=0.5)
        log = proc.log_path.read_text()
    source = await read_all(primary.bootstrap, topic, isolation="read_uncommitted")
    target = await read_all(backup.bootstrap, remote)
    everything = await read_all(backup.bootstrap, remote, isolation="read_uncommitted")
    for p in range(PARTITIONS):
        want, got = [shape(r) for r in source[p]], [shape(r) for r in target[p]]
        assert got == want, (f"partition {p}: {len(got)} committed records on the target for "
                             f"{len(want)} on the source "
                             f"({len(got) - len(set(got))} duplicates)")
        # Transactions really ran: commit markers sit between the rounds' records.
        offsets = [r.offset for r in target[p]]
        assert offsets[-1] + 1 > len(offsets), f"partition {p}: no transaction markers"
    # Whatever a killed round had written stays in the log: the next replicator's
    # InitProducerId (same transactional id) aborts it, and read_committed skips it.
    written = sum(len(rs) for rs in everything.values())
    assert written > produced, (
        "no kill left an aborted round on the target: the isolation was not tested")
    assert "Traceback" not in log


async def transactions(bootstrap: str, topic: str, tid: str, start: int, count: int
                       ) -> tuple[int, list[bytes]]:
    """`count` transactions of 20 records per partition; every third one aborted. Returns the
    next number and the values of the aborted records."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid,
                                enable_idempotence=True, linger_ms=2)
    await producer.start()
    aborted: list[bytes] = []
    n = start
    try:
        for t in range(count):
            abort = t % 3 == 1
            await producer.begin_transaction()
            futures = []
            for p in range(PARTITIONS):
                for _ in range(20):
                    value = f"{'aborted' if abort else 'committed'}-{n}".encode()
                    if abort:
                        aborted.append(value)
                    futures.append(await producer.send(topic, value, key=str(n).encode(),
                                                       partition=p))
                    n += 1
            await asyncio.gather(*futures)
            if abort:
                await producer.abort_transaction()
            else:
                await producer.commit_transaction()
        return n, aborted
    finally:
        await producer.stop()


async def test_a_transactional_source_with_aborted_transactions_reaches_the_target_committed(
        primary: LocalKafkaCluster, backup: LocalKafkaCluster, unique: str,
        tmp_path: Path) -> None:
    topic, remote = f"{unique}-txsrc", f"primary.{unique}-txsrc"
    await ready_topic(primary.bootstrap, topic, PARTITIONS)
    # The batch path whatever the source's batch sizes: its batches are written inside the
    # flow's transactions, with the transactional bit and the transactional producer's id.
    config = eos_config(primary, backup, topic, unique, **{"mirrorline.batch.path": "on"}) + \
        "primary.consumer.isolation.level = read_committed\n"
    n, aborted = await transactions(primary.bootstrap, topic, f"{unique}-src", 0, 30)
    committed = await read_all(primary.bootstrap, topic)
    async with replicator(config, tmp_path, name="first") as proc:
        async def first_half() -> bool:
            return await committed_total(backup, remote) >= sum(
                len(rs) for rs in committed.values())
        await wait_for(first_half, 60, f"{remote} never caught up", interval=0.3)
        await proc.signal(signal.SIGKILL)
        await proc.wait()
    # The resume point lies behind an aborted transaction and its markers: more of the
    # same, copied by a restarted replicator.
    n, more = await transactions(primary.bootstrap, topic, f"{unique}-src", n, 30)
    aborted += more
    source = await read_all(primary.bootstrap, topic)
    expected = sum(len(rs) for rs in source.values())
    async with replicator(config, tmp_path, name="second"):
        async def complete() -> bool:
            return await committed_total(backup, remote) >= expected
        await wait_for(complete, 60, f"{remote} never held {expected} records", interval=0.3)
    target = await read_all(backup.bootstrap, remote)
    everything = await read_all(backup.bootstrap, remote, isolation="read_uncommitted")
    leaked = {r.value for rs in everything.values() for r in rs} & set(aborted)
    assert not leaked, f"{len(leaked)} aborted source records reached the target"
    for p in range(PARTITIONS):
        want = [(r.key, r.value) for r in source[p]]
        assert [(r.key, r.value) for r in target[p]] == want, f"partition {p} differs"
        assert all(v.startswith(b"committed-") for v in (r.value for r in target[p]))
