"""The Spark executor as a real process (PySpark, local[2] and a standalone cluster) under a
real controller and replicator workers, on real brokers.

Spark start-ups are the expensive part (a JVM and Python workers each), so every test here
starts exactly one executor.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from helpers import (
    PAST_MS,
    Record,
    aliases,
    consume_all,
    create_topic,
    produce,
    raw_batches,
    shape,
    wait_for,
)
from mirrorline_spark.options import DEFAULT_MAX_RECORDS
from procs import Deployment, deployment, deployment_config, flow_spec, free_port

from mirrorline.core.batches import HEADER_SIZE, parse_header
from mirrorline.core.wire import OffsetSync
from mirrorline.dev.brokers import LocalBroker
from mirrorline.v1 import admin_pb2, flows_pb2, spark_pb2

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

RUNNING = flows_pb2.PARTITION_STATE_RUNNING


async def owners(d: Deployment) -> dict[tuple[str, int], str]:
    return {(p.source_topic, p.partition): p.worker_id for p in (await d.status()).partitions
            if p.state == RUNNING}


async def wait_owned(d: Deployment, topic: str, partitions: Sequence[int], prefix: str,
                     what: str, timeout: float = 180.0) -> None:
    async def owned() -> bool:
        now = await owners(d)
        return all(now.get((topic, p), "").startswith(prefix) for p in partitions)
    await wait_for(owned, timeout, what, interval=0.5)


def records(count: int, partitions: int, tag: str) -> list[Record]:
    """Keys, null values (every 7th), repeated headers (every 3rd), explicit timestamps."""
    return [Record(value=None if i % 7 == 0 else f"{tag}-{i}".encode(), key=f"k{i}".encode(),
                   headers=[("h", b"1"), ("h", b"2"), ("x", f"{i}".encode())] if i % 3 == 0
                   else [], timestamp_ms=PAST_MS + i, partition=i % partitions)
            for i in range(count)]


async def test_a_whole_flow_on_spark_mirrors_record_for_record_with_exact_offset_syncs(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """One query copies a flow on the batch path and, beside it, the reverse flow on the
    record path (`mirrorline.batch.path = off`: its tasks write the records they read);
    both land record for record, and status names each partition's path."""
    a, b = aliases()
    topic, back = f"{unique}-whole", f"{unique}-back"
    await create_topic(primary.bootstrap, topic, 2)
    await create_topic(backup.bootstrap, back, 2)
    sent = records(600, 2, "r")
    await produce(primary.bootstrap, topic, sent[:300])
    async with deployment(deployment_config({a: primary, b: backup}), tmp_path) as d:
        await d.controller("c1")
        await d.worker("w1")
        executor = await d.executor("x1")
        admin = d.admin(await d.leader())
        await admin.CreateFlow(admin_pb2.CreateFlowRequest(spec=flow_spec(
            a, b, topic, **{"mirrorline.executor": "spark", "offset.lag.max": "0"})))
        await admin.CreateFlow(admin_pb2.CreateFlowRequest(spec=flow_spec(
            b, a, back, **{"mirrorline.executor": "spark", "mirrorline.batch.path": "off",
                           # Not the shared brokers' heartbeat topics of other tests: copying
                           # hundreds of them back would load every test after this one.
                           "heartbeats.replication.enabled": "false"})))
        await wait_owned(d, topic, [0, 1], "spark:x1", "the flow did not move onto Spark")
        await wait_owned(d, back, [0, 1], "spark:x1", "the reverse flow is not on Spark")
        await produce(primary.bootstrap, topic, sent[300:], compression="zstd")
        await produce(backup.bootstrap, back, records(200, 2, "b"))
        source = await consume_all(primary.bootstrap, topic, expected=600)
        target = await consume_all(backup.bootstrap, f"{a}.{topic}", expected=600, timeout=120)
        for p in (0, 1):
            assert [shape(r) for r in target[p]] == [shape(r) for r in source[p]], p
        source = await consume_all(backup.bootstrap, back, expected=200)
        target = await consume_all(primary.bootstrap, f"{b}.{back}", expected=200, timeout=120)
        for p in (0, 1):
            assert [shape(r) for r in target[p]] == [shape(r) for r in source[p]], p

        # Offset syncs (offset.lag.max = 0: one per record) map every source offset to where
        # that very record landed.
        mapped: dict[tuple[int, int], int] = {}

        async def all_synced() -> bool:  # syncs are written asynchronously after each ack
            syncs = await consume_all(primary.bootstrap, f"mm2-offset-syncs.{b}.internal")
            for r in syncs[0]:
                sync = OffsetSync.decode(r.key, r.value)
                if sync.topic == topic:
                    mapped[(sync.partition, sync.upstream_offset)] = sync.downstream_offset
            return len(mapped) >= 600
        await wait_for(all_synced, 60, "offset syncs missing", interval=1)
        for p in (0, 1):
            by_offset = {r.offset: r for r in target[p]}
            for r in source[p]:
                landed = mapped[(p, r.offset)]
                assert shape(by_offset[landed]) == shape(r)

        # The batch path (mirrorline.batch.path's default): the target holds the source's
        # batches, records sections byte for byte, the zstd ones still zstd.
        for p in (0, 1):
            batches = [(parse_header(x).codec, x[HEADER_SIZE:])
                       for x in await raw_batches(primary.bootstrap, topic, p)]
            assert [(parse_header(x).codec, x[HEADER_SIZE:])
                    for x in await raw_batches(backup.bootstrap, f"{a}.{topic}", p)] \
                == batches, p
            assert {codec for codec, _ in batches} == {"none", "zstd"}

        async def shown() -> bool:  # status reflects heartbeats and the query's progress
            rows = [x for x in (await d.status()).partitions if x.source_topic == topic]
            backs = [x for x in (await d.status()).partitions if x.source_topic == back]
            return ({x.worker_id for x in rows + backs} == {"spark:x1"} and len(rows) == 2
                    and all(x.micro_batch_ms > 0 and x.next_offset == 300
                            and x.copy_path == "batches" for x in rows)
                    and len(backs) == 2 and all(
                        x.next_offset == 100 and x.copy_path == "records"
                        and x.copy_path_reason == "mirrorline.batch.path = off"
                        for x in backs))
        await wait_for(shown, 30, "status does not show the partitions on Spark", interval=0.5)
        workers = await admin.ListWorkers(admin_pb2.ListWorkersRequest())
        spark = [w for w in workers.workers if w.worker_id == "spark:x1"]
        assert spark and spark[0].kind == "spark" and spark[0].alive
        await executor.signal(signal.SIGTERM)
        assert await executor.wait(30) == 0


async def test_partitions_move_to_spark_and_back_mid_stream_and_return_when_it_dies(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """Offload and reclaim while records keep arriving, then SIGKILL the executor: every
    record arrives, in order; re-copies only replay a hand-over's last micro-batch."""
    a, b = aliases()
    topic = f"{unique}-moves"
    await create_topic(primary.bootstrap, topic, 2)
    async with deployment(deployment_config({a: primary, b: backup}), tmp_path) as d:
        await d.controller("c1")
        await d.worker("w1")
        admin = d.admin(await d.leader())
        flow = f"{a}->{b}"
        await admin.CreateFlow(admin_pb2.CreateFlowRequest(spec=flow_spec(a, b, topic)))
        await wait_owned(d, topic, [0, 1], "w1", "the workers did not take the flow")
        with pytest.raises(Exception, match="no Spark executor is alive"):
            await admin.OffloadPartitions(spark_pb2.PlacePartitionsRequest(flow=flow,
                                                                           topic=topic))
        executor = await d.executor("x1")
        sent = 0
        stop = asyncio.Event()

        async def keep_producing() -> None:
            nonlocal sent
            while not stop.is_set():
                await produce(primary.bootstrap, topic, [
                    Record(f"{sent + i:06d}".encode(), partition=(sent + i) % 2)
                    for i in range(50)])
                sent += 50
                await asyncio.sleep(0.1)

        producer = asyncio.create_task(keep_producing())
        try:
            async def offload() -> bool:
                try:
                    await admin.OffloadPartitions(spark_pb2.PlacePartitionsRequest(
                        flow=flow, topic=topic, partition=1))
                    return True
                except Exception:
                    return False  # the executor has not heartbeated yet
            await wait_for(offload, 180, "the executor never became available", interval=1)
            await wait_owned(d, topic, [1], "spark:x1", "partition 1 did not move to Spark")
            await wait_owned(d, topic, [0], "w1", "partition 0 should have stayed")
            mark = sent
            await wait_for(lambda: _past(d, topic, 1, mark + 100), 120,
                           "Spark did not copy partition 1", interval=0.5)
            await admin.ReclaimPartitions(spark_pb2.PlacePartitionsRequest(
                flow=flow, topic=topic, partition=1))
            await wait_owned(d, topic, [1], "w1", "partition 1 did not come back")
            await admin.OffloadPartitions(spark_pb2.PlacePartitionsRequest(flow=flow,
                                                                           topic=topic))
            await wait_owned(d, topic, [0, 1], "spark:x1", "the topic did not move to Spark")
            mark = sent
            await wait_for(lambda: _past(d, topic, 0, mark // 2 + 50), 120,
                           "Spark did not copy partition 0", interval=0.5)
            assert executor.proc is not None
            executor.proc.send_signal(signal.SIGKILL)
            await wait_owned(d, topic, [0, 1], "w1", "the partitions did not return to "
                             "the workers after the executor died", timeout=60)
        finally:
            stop.set()
            await producer
        expected = [f"{i:06d}".encode() for i in range(sent)]
        target = await consume_all(backup.bootstrap, f"{a}.{topic}", expected=sent,
                                   timeout=120)
        for p in (0, 1):
            values = [r.value for r in target[p]]
            first_seen: list[bytes | None] = []
            seen: set[bytes | None] = set()
            for v in values:
                if v not in seen:
                    seen.add(v)
                    first_seen.append(v)
            assert first_seen == expected[p::2], f"partition {p}: lost or reordered"
            # Drained hand-overs re-copy nothing; the SIGKILL replays at most what was
            # copied since progress was last recorded: one micro-batch (docs/spark.md).
            assert len(values) - len(first_seen) <= DEFAULT_MAX_RECORDS


async def _past(d: Deployment, topic: str, partition: int, offset: int) -> bool:
    for p in (await d.status()).partitions:
        if p.source_topic == topic and p.partition == partition:
            return p.next_offset >= offset
    return False


def _start_cluster(tmp: Path) -> tuple[list[subprocess.Popen[bytes]], str]:
    """Start a Spark master and one worker from the pyspark installation, on loopback."""
    import pyspark

    home = os.path.dirname(pyspark.__file__)
    spark_class = os.path.join(home, "bin", "spark-class")
    port, ui, wui = free_port(), free_port(), free_port()
    env = dict(os.environ, SPARK_HOME=home, PYSPARK_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1")
    procs = []
    with open(tmp / "master.log", "wb") as out:
        procs.append(subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(ui)], env=env, stdout=out,
            stderr=subprocess.STDOUT))
    with open(tmp / "worker.log", "wb") as out:
        procs.append(subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
             "--host", "127.0.0.1", "--cores", "2", "--memory", "1g", "--webui-port",
             str(wui), "--work-dir", str(tmp / "work")], env=env, stdout=out,
            stderr=subprocess.STDOUT))
    return procs, f"spark://127.0.0.1:{port}"


def _stop_cluster(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in reversed(procs):
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
async def standalone_cluster(tmp_path: Path) -> AsyncIterator[str]:
    """A Spark standalone master and worker (real processes) for one test."""
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    procs, url = await asyncio.to_thread(_start_cluster, cluster)
    try:
        async def registered() -> bool:
            log = await asyncio.to_thread((cluster / "worker.log").read_bytes)
            return b"Successfully registered with master" in log
        await wait_for(registered, 120, "the standalone worker did not register", interval=0.5)
        yield url
    finally:
        await asyncio.to_thread(_stop_cluster, procs)
        shutil.rmtree(cluster / "work", ignore_errors=True)


async def test_the_executor_runs_on_a_standalone_spark_cluster(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path,
        standalone_cluster: str) -> None:
    a, b = aliases()
    topic = f"{unique}-cluster"
    await create_topic(primary.bootstrap, topic, 2)
    sent = records(200, 2, "c")
    await produce(primary.bootstrap, topic, sent)
    async with deployment(deployment_config({a: primary, b: backup}), tmp_path) as d:
        await d.controller("c1")
        await d.executor("x1", master=standalone_cluster,
                         conf={"spark.executor.memory": "512m", "spark.cores.max": "2"})
        admin = d.admin(await d.leader())
        await admin.CreateFlow(admin_pb2.CreateFlowRequest(spec=flow_spec(
            a, b, topic, **{"mirrorline.executor": "spark"})))
        source = await consume_all(primary.bootstrap, topic, expected=200)
        target = await consume_all(backup.bootstrap, f"{a}.{topic}", expected=200, timeout=240)
        for p in (0, 1):
            assert [shape(r) for r in target[p]] == [shape(r) for r in source[p]]
        assert {w for w in (await owners(d)).values()} == {"spark:x1"}
