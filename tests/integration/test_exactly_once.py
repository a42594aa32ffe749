"""No duplicates after a crash: every partition resumes from what the target holds.

Bursts of tens of thousands of records per partition are copied while Mirrorline processes
are killed with SIGKILL -- the standalone replicator, a worker under a controller, the
whole `mirrorline run` -- and the target must end up with every source record exactly
once, in order. A foreign record in the remote topic and a forged progress record must be
reported loudly, losing nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from helpers import (
    aliases,
    broker_kind,
    consume_all,
    create_topic,
    start_cluster,
    stop_cluster,
    wait_for,
)
from procs import (
    QUIET_SHARED_CLUSTERS,
    config_for,
    deployment,
    deployment_config,
    flow_spec,
    free_port,
    mm2_config,
    replicator,
)

from mirrorline.core.progress import encode_offset, progress_topic, source_offset_key
from mirrorline.dev import kafka
from mirrorline.dev.brokers import LocalBroker, start_broker, stop_broker_async
from mirrorline.kafka.watermarks import high_watermarks, totals
from mirrorline.v1 import admin_pb2, flows_pb2

pytestmark = pytest.mark.integration

PARTITIONS = 2
BURST = 20_000  # records per partition per burst
#: Small produce batches on the target: many batches in flight, so kills land mid-batch.
BATCH_BYTES = 16384


def numbered(n: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    return str(n).encode(), str(n).encode().rjust(80, b"."), [("n", str(n).encode())]


async def burst(bootstrap: str, topic: str, start: int, per_partition: int, *,
                batch_bytes: int = 256 * 1024) -> int:
    """Produce `per_partition` numbered records to every partition, fast (in batches of
    `batch_bytes`: a fetch returns at least one whole batch, however small its limit)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5,
                                max_batch_size=batch_bytes)
    await producer.start()
    try:
        n = start
        futures = []
        for p in range(PARTITIONS):
            batch = producer.create_batch()
            for _ in range(per_partition):
                key, value, headers = numbered(n)
                if batch.append(key=key, value=value, timestamp=None, headers=headers) is None:
                    futures.append(await producer.send_batch(batch, topic, partition=p))
                    batch = producer.create_batch()
                    batch.append(key=key, value=value, timestamp=None, headers=headers)
                n += 1
            futures.append(await producer.send_batch(batch, topic, partition=p))
        await asyncio.gather(*futures)
        return n
    finally:
        await producer.stop()


async def target_total(backup: LocalBroker, remote: str) -> int:
    return totals(await high_watermarks({"bootstrap_servers": backup.bootstrap}, [remote])
                  ).get(remote, 0)


async def grows_past(backup: LocalBroker, remote: str, count: int, timeout: float = 60) -> None:
    async def grown() -> bool:
        return await target_total(backup, remote) > count
    await wait_for(grown, timeout, f"{remote} never held more than {count} records",
                   interval=0.05)


async def assert_exactly_once(primary: LocalBroker, backup: LocalBroker, topic: str,
                              remote: str, timeout: float = 90,
                              reported_twice: bool = False) -> None:
    """Wait until the target holds as many records as the source, then compare them all:
    same keys, values, headers, timestamps, in the same order, nothing twice.
    `reported_twice`: the replicator said some records may be on the target twice; then
    every record must be there, in order of first appearance."""
    source = await consume_all(primary.bootstrap, topic)
    expected = sum(len(v) for v in source.values())

    async def complete() -> bool:
        return await target_total(backup, remote) >= expected
    await wait_for(complete, timeout, f"{remote} never caught up with {expected} records",
                   interval=0.5)
    target = await consume_all(backup.bootstrap, remote, timeout=timeout)
    for p in range(PARTITIONS):
        want = [(r.key, r.value, tuple(r.headers), r.timestamp) for r in source[p]]
        got = [(r.key, r.value, tuple(r.headers), r.timestamp) for r in target[p]]
        extra = len(got) - len(set(got))
        if reported_twice:
            assert list(dict.fromkeys(got)) == want, f"partition {p}: lost or reordered"
            continue
        assert got == want, (f"partition {p}: {len(got)} records on the target for "
                             f"{len(want)} on the source ({extra} duplicates)")


async def caught_up(primary: LocalBroker, target: LocalBroker, topic: str, remote: str
                    ) -> bool:
    source = totals(await high_watermarks({"bootstrap_servers": primary.bootstrap}, [topic]))
    return await target_total(target, remote) >= source.get(topic, 0)


async def test_repeated_sigkill_mid_burst_leaves_every_record_exactly_once_in_order(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    topic, remote = f"{unique}-kills", f"primary.{unique}-kills"
    await create_topic(primary.bootstrap, topic, PARTITIONS)
    # Small fetches (a few records each: small source batches, a small fetch limit)
    # spread a burst's copy over a couple of seconds: on a quiet machine the whole burst
    # was otherwise copied within the time it takes to see the first copies land, and
    # no kill came mid-copy.
    config = config_for(primary, backup, topic, batch_bytes=BATCH_BYTES) + \
        "primary.consumer.max.partition.fetch.bytes = 2048\n"
    produced, mid_copy = 0, 0
    for round_ in range(3):
        copied = await target_total(backup, remote)
        async with replicator(config, tmp_path, name=f"r{round_}") as proc:
            # The burst is produced once the replicator is up (it is ready only after
            # copying what is already there), and it is killed while the burst lands:
            # batches are in flight, and most of the burst is still to be copied.
            producing = asyncio.create_task(burst(primary.bootstrap, topic, produced, BURST,
                                                  batch_bytes=2048))
            # A couple of thousand records in: the partitions' first offset syncs are out
            # (a kill before any bookkeeping exists is the one case tail matching cannot
            # place; see ARCHITECTURE.md), and most of the burst is still to come.
            await grows_past(backup, remote, copied + 2000)
            await proc.signal(signal.SIGKILL)
            assert await proc.wait() == -signal.SIGKILL
            produced = await producing
        mid_copy += await target_total(backup, remote) < produced
    assert mid_copy, "every kill came after the burst was copied: nothing was tested"
    async with replicator(config, tmp_path, name="last") as proc:
        await assert_exactly_once(primary, backup, topic, remote)
        log = proc.log_path.read_text()
    assert "resuming at source offset" in log  # the tail was matched, not guessed


async def test_a_foreign_record_in_the_remote_topic_falls_back_loudly_and_loses_nothing(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    topic, remote = f"{unique}-foreign", f"primary.{unique}-foreign"
    await create_topic(primary.bootstrap, topic, PARTITIONS)
    config = config_for(primary, backup, topic, batch_bytes=BATCH_BYTES)
    produced = await burst(primary.bootstrap, topic, 0, 500)
    async with replicator(config, tmp_path, name="first") as proc:
        await grows_past(backup, remote, 2 * 500 - 1)
        await proc.signal(signal.SIGTERM)
        assert await proc.wait() == 0
    # Someone else writes into the remote topic's partition 1.
    intruder = AIOKafkaProducer(bootstrap_servers=backup.bootstrap)
    await intruder.start()
    try:
        await intruder.send_and_wait(remote, b"not from the source", key=b"x", partition=1)
    finally:
        await intruder.stop()
    produced = await burst(primary.bootstrap, topic, produced, 500)
    async with replicator(config, tmp_path, name="second") as proc:
        async def reported() -> bool:
            status = await proc.replicator_status()
            return any(p.partition == 1 and "not matched" in p.error
                       for p in status.partitions)
        await wait_for(reported, 30, "the unmatched tail was not reported in the status")
        target = await consume_all(backup.bootstrap, remote, expected=produced + 1)
        log = proc.log_path.read_text()
    assert "-1: tail on the target not matched" in log and "someone else" in log
    source = await consume_all(primary.bootstrap, topic)
    for p in range(PARTITIONS):
        values = [r.value for r in target[p] if r.value != b"not from the source"]
        assert values == [r.value for r in source[p]], f"partition {p} lost or repeated records"


async def test_forged_progress_ahead_of_the_target_stops_the_partition_loudly(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    topic, remote = f"{unique}-forged", f"primary.{unique}-forged"
    await create_topic(primary.bootstrap, topic, PARTITIONS)
    config = config_for(primary, backup, topic, batch_bytes=BATCH_BYTES)
    produced = await burst(primary.bootstrap, topic, 0, 300)
    async with replicator(config, tmp_path, name="first") as proc:
        await grows_past(backup, remote, 2 * 300 - 1)
        await proc.signal(signal.SIGTERM)
        assert await proc.wait() == 0
    await burst(primary.bootstrap, topic, produced, 300)
    # Progress claims partition 1 was copied up to offset 430 (the truth: 299).
    forger = AIOKafkaProducer(bootstrap_servers=backup.bootstrap)
    await forger.start()
    try:
        await forger.send_and_wait(progress_topic("primary"),
                                   key=source_offset_key("primary", topic, 1),
                                   value=encode_offset(430))
    finally:
        await forger.stop()
    async with replicator(config, tmp_path, name="second") as proc:
        async def stopped() -> bool:
            status = await proc.replicator_status()
            return any(p.partition == 1 and p.state == flows_pb2.PARTITION_STATE_ERROR
                       for p in status.partitions)
        await wait_for(stopped, 30, "the partition with forged progress was not stopped")
        target = await consume_all(backup.bootstrap, remote, expected=300 + 600)
        status = await proc.replicator_status()
        log = proc.log_path.read_text()
    error = next(p.error for p in status.partitions if p.partition == 1)
    assert f"{topic}-1" in error and "431" in error and "300" in error, error
    assert "ahead of the truth" in log and f"{topic}-1" in log
    source = await consume_all(primary.bootstrap, topic)
    # Partition 0 went on; partition 1 kept what it had and skipped nothing.
    assert [r.value for r in target[0]] == [r.value for r in source[0]]
    assert [r.value for r in target[1]] == [r.value for r in source[1]][:300]


async def test_worker_hand_over_after_sigkill_copies_nothing_twice(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    a, b = aliases()
    topic, remote = f"{unique}-handover", f"{a}.{unique}-handover"
    await create_topic(primary.bootstrap, topic, PARTITIONS)
    config = deployment_config({a: primary, b: backup},
                               **{f"{b}_producer_batch_size": str(BATCH_BYTES)})
    async with deployment(config, tmp_path, lease_ms=2000) as d:
        await d.controller("c1")
        await d.worker("w1")
        admin = d.admin(await d.leader())
        await admin.CreateFlow(admin_pb2.CreateFlowRequest(spec=flow_spec(a, b, topic)))
        produced = 0
        for victim, heir in (("w1", "w2"), ("w2", "w3")):
            # Counted before the burst: on the batch path the owner can copy a whole burst
            # before a count taken after it, and the target would then never grow past it.
            copied = await target_total(backup, remote)
            produced = await burst(primary.bootstrap, topic, produced, BURST // 2)
            await grows_past(backup, remote, copied + 3000)
            await d.worker(heir)
            await d.workers[victim].signal(signal.SIGKILL)  # mid-burst
            await d.workers[victim].wait()

            async def handed_over(heir: str = heir) -> bool:
                # Only this test's topic: the shared source may hold other tests'
                # heartbeat topics, which every flow copies too.
                owners = {tp: w for tp, w in (await d.owners()).items() if tp[0] == topic}
                return len(owners) == PARTITIONS and set(owners.values()) == {heir}
            await wait_for(handed_over, 40, f"the partitions never moved to {heir}",
                           interval=0.3)
        await assert_exactly_once(primary, backup, topic, remote)


@contextlib.asynccontextmanager
async def mirrorline_run(config: Path, log: Path, offset: int) -> AsyncIterator[
        asyncio.subprocess.Process]:
    """`mirrorline run` in a session of its own, so it can be killed with its children."""
    out = log.open("ab")
    run = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mirrorline", "run", "--config", str(config), "--workers", "1",
        "--port-offset", str(offset), "--lease-ms", "2000", stdout=out, stderr=out,
        start_new_session=True)
    out.close()
    try:
        yield run
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
        await run.wait()


async def test_sigkill_of_the_whole_run_mid_burst_copies_nothing_twice(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    topic, remote = f"{unique}-run", f"primary.{unique}-run"
    await create_topic(primary.bootstrap, topic, PARTITIONS)
    config = tmp_path / "mm2.properties"
    config.write_text(mm2_config(
        {"primary": primary, "backup": backup}, {"primary->backup": {
            "topics": topic, "refresh.topics.interval.seconds": "1"}},
        backup_producer_batch_size=str(BATCH_BYTES), mirrorline_deployment=unique,
        **QUIET_SHARED_CLUSTERS))
    # `run` listens on 7100..9750 + offset: below the ephemeral port range (where other
    # processes' connections live) and away from the other tests' fixed offsets.
    offset = 12_000 + secrets.randbelow(80) * 50
    produced = await burst(primary.bootstrap, topic, 0, BURST)
    async with mirrorline_run(config, tmp_path / "run.log", offset) as run:
        await grows_past(backup, remote, 3000, timeout=90)
        os.killpg(run.pid, signal.SIGKILL)  # every process of the deployment at once
    await burst(primary.bootstrap, topic, produced, BURST // 4)
    async with mirrorline_run(config, tmp_path / "run.log", offset):
        await assert_exactly_once(primary, backup, topic, remote)


@contextlib.asynccontextmanager
async def s3_storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """A local S3 (moto_server) for Tansu's `s3://` storage, which survives a broker's
    `kill -9` and restart; yields the storage URL. The environment variables tell Tansu
    brokers started by this test where to find it."""
    port = free_port()
    log = (tmp_path / "moto.log").open("wb")
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "moto.server", "-p", str(port), stdout=log, stderr=log)
    log.close()
    endpoint = f"http://127.0.0.1:{port}"
    env = {"AWS_ENDPOINT": endpoint, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    try:
        async def bucket_created() -> bool:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                return False
            writer.write(b"PUT /tansu HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            answer = await reader.read(12)
            writer.close()
            return answer.startswith(b"HTTP/1.1 200")
        await wait_for(bucket_created, 30, "moto_server did not start", interval=0.2)
        yield "s3://tansu/"
    finally:
        server.kill()
        await server.wait()


class DurableTarget:
    """A one-node target cluster that keeps its records across a stop: Apache Kafka (its
    log on disk) or, on Tansu, a broker on `s3://` storage; restarted on the same port."""

    def __init__(self, tmp_path: Path, storage: str | None) -> None:
        self.tmp_path, self.storage, self.port = tmp_path, storage, free_port()
        self.cluster: Any = None

    async def start(self) -> Any:
        if self.storage is None:
            self.cluster = await start_cluster("durable", self.tmp_path / "durable",
                                               port=self.port)
        else:
            self.cluster = await start_broker("durable", port=self.port, storage=self.storage,
                                              log_dir=self.tmp_path)
        return self.cluster

    async def stop(self, *, kill: bool) -> None:
        if isinstance(self.cluster, kafka.LocalKafkaCluster):
            await kafka.stop_node(self.cluster, 1, kill=kill)
        elif kill:
            os.kill(self.cluster.pid, signal.SIGKILL)
        else:
            await stop_broker_async(self.cluster.pid)

    async def restart(self) -> Any:
        if isinstance(self.cluster, kafka.LocalKafkaCluster):
            self.cluster = await kafka.restart_node(self.cluster, 1)
        else:
            self.cluster = await start_broker("durable", port=self.port, storage=self.storage,
                                              log_dir=self.tmp_path / "again")
        return self.cluster

    async def close(self) -> None:
        if self.cluster is not None:
            await stop_cluster(self.cluster)


@contextlib.asynccontextmanager
async def durable_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                         ) -> AsyncIterator[DurableTarget]:
    async with contextlib.AsyncExitStack() as stack:
        storage = None
        if broker_kind() == "tansu":
            storage = await stack.enter_async_context(s3_storage(tmp_path, monkeypatch))
        target = DurableTarget(tmp_path, storage)
        await target.start()
        try:
            yield target
        finally:
            await target.close()


async def test_a_target_outage_leaves_every_record_exactly_once_in_order(
        primary: LocalBroker, unique: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    topic = f"{unique}-outage"
    remote = f"primary.{topic}"
    await create_topic(primary.bootstrap, topic, PARTITIONS)
    async with durable_target(tmp_path, monkeypatch) as durable:
        target = durable.cluster
        # The client gives up on a batch after 2 s: the replicator must then find out
        # what reached the target before it sends anything again.
        config = mm2_config({"primary": primary, "durable": target}, {"primary->durable": {
            "topics": topic, "refresh.topics.interval.seconds": "2"}},
            durable_producer_batch_size=str(BATCH_BYTES),
            durable_producer_request_timeout_ms="2000")
        produced = await burst(primary.bootstrap, topic, 0, BURST // 4)
        async with replicator(config, tmp_path, name="outage") as proc:
            await grows_past(target, remote, 2000)
            # The broker stops mid-copy, batches in flight. (After `kill -9`, Tansu's s3
            # storage can come back with acknowledged records missing, or claimed by
            # the high watermark but never served: no mirror can verify such a target.)
            await durable.stop(kill=False)
            await burst(primary.bootstrap, topic, produced, BURST // 10)

            async def given_up() -> bool:
                status = await proc.replicator_status()
                return any("the target" in p.error for p in status.partitions)
            await wait_for(given_up, 60, "no partition noticed the outage")
            target = await durable.restart()
            # Tansu's s3 storage can come back claiming records (high watermark) that
            # it cannot serve; the replicator then says it re-sends unchecked.
            await wait_for(lambda: caught_up(primary, target, topic, remote), 120,
                           "the target never caught up", interval=0.5)
            log = proc.log_path.read_text()
            await assert_exactly_once(primary, target, topic, remote, timeout=120,
                                      reported_twice="may be on the target twice" in log)
        assert "checking the target" in log


async def test_a_fenced_worker_lets_go_only_when_nothing_it_sent_can_land_later(
        primary: LocalBroker, unique: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue: a partition stopped during a target outage still had a send in flight, which
    the client delivered minutes later, after another owner had taken over."""
    topic = f"{unique}-fenced"
    await create_topic(primary.bootstrap, topic, PARTITIONS)
    async with durable_target(tmp_path, monkeypatch) as durable:
        target = durable.cluster
        a, b = aliases()
        remote = f"{a}.{topic}"
        # Small source batches fetched a couple of KiB at a time, produced while the copy
        # runs: the copy is still under way when the target is killed, whichever path it
        # takes (a burst produced first is copied as whole batches before it could be).
        config = deployment_config({a: primary, b: target},  # home cluster: the source
                                   **{f"{b}_producer_batch_size": str(BATCH_BYTES),
                                      f"{a}_consumer_max_partition_fetch_bytes": "2048"})
        async with deployment(config, tmp_path, lease_ms=2000) as d:
            await d.controller("c1")
            await d.worker("w1")
            admin = d.admin(await d.leader())
            await admin.CreateFlow(admin_pb2.CreateFlowRequest(
                spec=flow_spec(a, b, topic)))
            producing = asyncio.create_task(burst(primary.bootstrap, topic, 0, BURST // 4,
                                                  batch_bytes=2048))
            await grows_past(target, remote, 2000)
            # Killed, not stopped: the client keeps its batches in flight and retries
            # them until they expire -- exactly what a fenced worker must cancel.
            await durable.stop(kill=True)
            produced = await producing
            # The controller stops answering: w1 fences itself and lets go; after the
            # lease the partitions go to whoever heartbeats.
            await d.controllers["c1"].signal(signal.SIGSTOP)
            await d.worker("w2")

            async def fenced() -> bool:
                return "stopping every partition" in d.workers["w1"].log_path.read_text()
            await wait_for(fenced, 30, "w1 never fenced itself")
            await d.controllers["c1"].signal(signal.SIGCONT)
            await burst(primary.bootstrap, topic, produced, BURST // 10)
            target = await durable.restart()
            await assert_exactly_once(primary, target, topic, remote, timeout=120)
            log = d.workers["w1"].log_path.read_text()
        assert "batches in flight: fenced" in log and "cancelling 0 " not in log


@pytest.mark.tansu_only
async def test_required_exactly_once_on_a_target_without_usable_transactions_exits_2(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """Tansu refuses aiokafka's InitProducerId: asking for transactions
    must stop the replicator with a configuration error naming the key, not copy
    at-least-once silently."""
    config = tmp_path / "mm2.properties"
    config.write_text(mm2_config({"primary": primary, "backup": backup}, {"primary->backup": {
        "topics": f"{unique}-eos", "exactly.once.support": "required"}}))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mirrorline", "replicator", "--config", str(config),
        "--metrics-port", "-1", "--grpc-port", str(free_port()),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    text = out.decode()
    assert proc.returncode == 2, text
    assert "configuration error" in text and "primary->backup.exactly.once.support" in text
    assert "InitProducerId" in text


@pytest.mark.tansu_only
async def test_requested_exactly_once_on_a_target_without_usable_transactions_copies_anyway(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """`requested` uses transactions only where they run: on Tansu the
    probe fails, so the flow copies every record without them and says so, naming the key."""
    topic, remote = f"{unique}-eos-req", f"primary.{unique}-eos-req"
    await create_topic(primary.bootstrap, topic, PARTITIONS)
    await burst(primary.bootstrap, topic, 0, 500)
    config = mm2_config({"primary": primary, "backup": backup}, {"primary->backup": {
        "topics": topic, "exactly.once.support": "requested"}})
    async with replicator(config, tmp_path, name="requested") as proc:
        await assert_exactly_once(primary, backup, topic, remote)
        log = proc.log_path.read_text()
    assert "primary->backup.exactly.once.support = requested" in log
    assert "records are copied without them" in log
