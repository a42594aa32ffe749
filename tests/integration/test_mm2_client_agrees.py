"""MM2's own client library, run against what Mirrorline wrote, answers as Mirrorline does.

Item 5 of issue 21. `tests/java/Mm2ClientProbe.java` calls `MirrorClient` (remoteTopics,
upstreamClusters, replicationHops, checkpointTopics, heartbeatTopics) and
`RemoteClusterUtils.translateOffsets` of connect-mirror-client 4.3.1; the test compiles it
with `javac` against the installed Kafka jars and runs it on a chain alpha -> bravo ->
charlie that only Mirrorline processes wrote (replicator, checkpointer and heartbeat
service of a controller-run deployment). Its clusters are its own: the heartbeat service
writes `heartbeats` topics that the suite's shared clusters must not carry.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from helpers import commit_offsets, consume_all, produce, wait_for
from mm2_peer import create_ready, numbered, trim, wait_checkpoints
from procs import Deployment, ServiceProcess, admin_cli_json, free_port

from mirrorline.client import MirrorClient
from mirrorline.dev import kafka, mm2

#: Three brokers, a deployment and two JVM runs on a 2-core machine take minutes.
pytestmark = [pytest.mark.integration, pytest.mark.kafka_only, pytest.mark.timeout(600)]

PROBE = Path(__file__).parent.parent / "java" / "Mm2ClientProbe.java"
ALIASES = ("alpha", "bravo", "charlie")


@pytest.fixture(scope="module")
async def chain(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Any]]:
    """Three one-node Apache Kafka clusters of this module's own."""
    directory = tmp_path_factory.mktemp("chain")
    started = await asyncio.gather(*(kafka.start_kafka(alias, directory=directory / alias)
                                     for alias in ALIASES),
                                   compile_probe(directory / "probe-classes"),
                                   return_exceptions=True)
    running = [c for c in started if isinstance(c, kafka.LocalKafkaCluster)]
    try:
        for result in started:
            if isinstance(result, BaseException):
                raise result
        yield {**{c.alias: c for c in running}, "probe": directory / "probe-classes"}
    finally:
        await asyncio.gather(*(kafka.stop_kafka(c, timeout=2.0) for c in running))


async def compile_probe(classes: Path) -> None:
    """`javac -cp LIB/*` the Java probe into `classes`."""
    javac = shutil.which("javac")
    assert javac, "javac (a JDK) is needed to compile the MM2 client probe"
    built = await asyncio.create_subprocess_exec(
        javac, "-d", str(classes), "-cp", f"{kafka.lib_dir()}/*", str(PROBE),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await built.communicate()
    assert built.returncode == 0, out.decode()


async def run_probe(tmp: Path, classes: Path, bootstrap: str, upstream: str,
                    *groups: str) -> set[str]:
    """Run the Java probe against `bootstrap`; its answer lines."""
    log_config = kafka.write_log_config(tmp / "probe-log4j2.yaml", tmp / "probe.log")
    command = kafka.java_command("Mm2ClientProbe", bootstrap, upstream, *groups,
                                 log_config=log_config, extra_classpath=[str(classes)],
                                 shared_classes=True)
    ran = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE,
                                               stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(ran.communicate(), 120)
    assert ran.returncode == 0, err.decode()
    return set(out.decode().splitlines())



async def mirrorline_view(bootstrap: str, upstream: str) -> set[str]:
    """`mirrorline.client`'s answers, in the probe's line format (translations aside)."""
    async with MirrorClient({"bootstrap.servers": bootstrap}) as client:
        lines = {f"remote-topic\t{t}" for t in await client.remote_topics()}
        for alias in await client.upstream_clusters():
            lines |= {f"upstream-cluster\t{alias}",
                      f"hops\t{alias}\t{await client.replication_hops(alias)}"}
        lines.add(f"hops\t{upstream}\t{await client.replication_hops(upstream)}")
        lines |= {f"checkpoint-topic\t{t}" for t in await client.checkpoint_topics()}
        lines |= {f"heartbeat-topic\t{t}" for t in await client.heartbeat_topics()}
    return lines


async def test_mm2_client_library_agrees_with_mirrorline(
        chain: dict[str, Any], unique: str, tmp_path: Path) -> None:
    """Fails if Mirrorline's checkpoints, heartbeats or remote topic names are not what
    MM2's client reads, or if its translation differs from the one MM2's client reads."""
    alpha, bravo, charlie = (chain[a] for a in ALIASES)
    topic, group = f"{unique}-orders", f"{unique}-app"
    await create_ready(alpha.bootstrap, topic, 2)
    await produce(alpha.bootstrap, topic, numbered(topic, 40, 0))
    # Source offsets below 10 are gone: target offsets are source offsets - 10, so a
    # translation that misreads an offset cannot agree by accident.
    await trim(alpha.bootstrap, topic, 2, 10)
    quick = {**mm2.SINGLE_NODE_SETTINGS, **mm2.QUICK_SETTINGS,
             "emit.heartbeats.interval.seconds": "1", "canary.enabled": "false",
             "audit.enabled": "false", "mirrorline.deployment": f"d{unique}"}
    config = "\n".join([
        "clusters = alpha, bravo, charlie",
        *(f"{c.alias}.bootstrap.servers = {c.bootstrap}" for c in (alpha, bravo, charlie)),
        *(f"{k} = {v}" for k, v in quick.items()),
        "alpha->bravo.enabled = true", f"alpha->bravo.topics = {topic}",
        "bravo->charlie.enabled = true", f"bravo->charlie.topics = alpha\\.{topic}",
    ]) + "\n"
    d = Deployment(config, tmp_path)
    try:
        await d.controller("c1")
        await d.worker("w1")
        await d.checkpointer("k1")
        port = free_port()
        beat = ServiceProcess(["heartbeat", "--managed", "--config", str(d.path),
                               "--instance-id", "h1", "--grpc-port", str(port),
                               "--metrics-port", "-1"], grpc_port=port,
                              log_path=tmp_path / "h1.log")
        d.checkpointers["h1"] = beat  # closed with the deployment
        await beat.start()
        await beat.wait_serving(60)
        server = f"127.0.0.1:{d.controllers['c1'].grpc_port}"
        await consume_all(charlie.bootstrap, f"bravo.alpha.{topic}", expected=60, timeout=90)
        await commit_offsets(alpha.bootstrap, group, {(topic, 0): 25, (topic, 1): 40})
        remote = f"alpha.{topic}"
        await wait_checkpoints(bravo, "alpha", group, {(remote, 0): 25, (remote, 1): 40},
                               downstream={(remote, 0): 15, (remote, 1): 30})

        async def charlie_sees_alpha() -> bool:
            report = await admin_cli_json(server, "topology", "--cluster", "charlie")
            (view,) = report["clusters"]
            return any(p["route"][0] == "alpha" and not p["stale"] for p in view["paths"])
        await wait_for(charlie_sees_alpha, 90, "charlie never saw alpha's heartbeats",
                       interval=1)

        # Offsets: RemoteClusterUtils.translateOffsets == `admin offsets translate`.
        on_bravo = await run_probe(tmp_path, chain["probe"], bravo.bootstrap, "alpha", group)
        translated = await admin_cli_json(server, "offsets", "translate", "alpha->bravo",
                                      "--group", group)
        ours = {f"translated\t{group}\t{p['target_topic']}\t{p['partition']}\t"
                f"{int(p['target_offset'])}" for p in translated["partitions"]}
        assert {line for line in on_bravo if line.startswith("translated")} == ours
        assert ours == {f"translated\t{group}\t{remote}\t0\t15",
                        f"translated\t{group}\t{remote}\t1\t30"}

        # Topology: upstreamClusters / replicationHops == `admin topology`.
        report = await admin_cli_json(server, "topology")
        for cluster in (bravo, charlie):
            answers = await run_probe(tmp_path, chain["probe"], cluster.bootstrap, "alpha")
            (view,) = [c for c in report["clusters"] if c["cluster"] == cluster.alias]
            upstream = set(view["upstream"])
            assert {a.split("\t")[1] for a in answers if a.startswith("upstream-cluster")} \
                == upstream, (cluster.alias, answers, view)
            hops: dict[str, int] = {}
            for path in view["paths"]:
                origin = path["route"][0]
                hops[origin] = min(hops.get(origin, 1 << 30), int(path["hops"]))
            assert {a for a in answers if a.startswith("hops")} == \
                {f"hops\t{o}\t{n}" for o, n in hops.items()} | {f"hops\talpha\t{hops['alpha']}"}
            # The rest: MirrorClient's topic listings == mirrorline.client's, but for one
            # difference: MM2 4.3.1's ReplicationPolicy.isInternalTopic no longer counts
            # `*.internal` / `*-internal` names as internal, so its remoteTopics() also
            # lists Mirrorline's own topics (offset map, control log) as remote topics of
            # a "source" named by their first segment; Mirrorline's client (and
            # replicator) keep treating them as internal (docs/configuration.md, "Other
            # deliberate differences from MM2").
            listed = answers - {a for a in answers if a.startswith("translated")}
            ours_listed = await mirrorline_view(cluster.bootstrap, "alpha")
            assert ours_listed <= listed, (cluster.alias, ours_listed - listed)
            assert all(line.startswith("remote-topic\tmirrorline-")
                       and line.endswith(".internal") for line in listed - ours_listed), \
                (cluster.alias, listed - ours_listed)
    finally:
        await d.close()
