"""Contender: Apache Kafka's MirrorMaker 2 (dedicated mode), as an operator runs it.

One JVM (`org.apache.kafka.connect.mirror.MirrorMaker --clusters target`, started through
`mirrorline.dev.mm2` with the jars of the brokers' own release) mirrors the source topic
into the pre-created target topic under MM2's `IdentityReplicationPolicy`, with MM2's
defaults for everything that moves records (consumer, producer, one task per partition
up to `tasks.max`). Its checkpoints, heartbeats and topic-config/ACL sync are off, as
the other contenders do none of that; its progress and offset syncs are written as
always. Needs Apache Kafka brokers (`--broker kafka`): MM2's Connect runtime does not run
on Tansu. The JVM runs with the options Kafka's `connect-mirror-maker.sh` gives it (heap
256 MiB - 2 GiB, G1), not the quick-start options of the test brokers. On a compressed
source topic its producer compresses with the source's codec
(`<target>.producer.compression.type`; MM2's default is none). The JVM's CPU time over
the copying window and its peak resident memory are recorded for the cost table.
"""

from __future__ import annotations

import asyncio
import time

from bench.common import BenchEnv, ContenderUnavailable, ProcessCost
from mirrorline.dev import kafka, mm2

#: KAFKA_HEAP_OPTS of connect-mirror-maker.sh and KAFKA_JVM_PERFORMANCE_OPTS of
#: kafka-run-class.sh, as an operator's MM2 runs.
JVM_OPTS = ("-Xms256M", "-Xmx2G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
            "-Djava.awt.headless=true")


def config(env: BenchEnv) -> str:
    flow = f"{env.source_alias}->{env.target_alias}"
    settings = {
        **mm2.SINGLE_NODE_SETTINGS,
        "replication.policy.class":
            "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        "emit.heartbeats.enabled": "false",
        "emit.checkpoints.enabled": "false",
        "sync.topic.configs.enabled": "false",
        "sync.topic.acls.enabled": "false",
        "refresh.topics.interval.seconds": "5",
        "tasks.max": str(env.partitions),
    }
    if env.codec != "none":  # compress again with the source's codec, as the others do
        settings[f"{env.target_alias}.producer.compression.type"] = env.codec
    return "\n".join([
        f"clusters = {env.source_alias}, {env.target_alias}",
        f"{env.source_alias}.bootstrap.servers = {env.source_bootstrap}",
        f"{env.target_alias}.bootstrap.servers = {env.target_bootstrap}",
        *(f"{k} = {v}" for k, v in settings.items()),
        f"{flow}.enabled = true",
        f"{flow}.topics = {env.source_topic}",
        f"{env.target_alias}->{env.source_alias}.enabled = false",
        "",
    ])


async def run(env: BenchEnv) -> float:
    if env.broker_kind != "kafka":
        raise ContenderUnavailable("MirrorMaker 2 needs Apache Kafka brokers (--broker kafka)")
    if not kafka.available():
        raise ContenderUnavailable("Java or the Kafka jars are missing "
                                   "('mirrorline dev kafka install')")
    path = env.workdir / "mm2.properties"
    await asyncio.to_thread(path.write_text, config(env))
    started = time.perf_counter()
    process = await mm2.start_mm2(path, directory=env.workdir, clusters=[env.target_alias],
                                  jvm_opts=JVM_OPTS)
    waiter = asyncio.ensure_future(asyncio.to_thread(process.proc.wait))
    try:
        return await env.wait_mirrored(started, watch=[waiter], cost=ProcessCost([process.pid]))
    finally:
        await mm2.stop_mm2(process, timeout=20)
        await asyncio.gather(waiter, return_exceptions=True)
