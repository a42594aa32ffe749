"""The heartbeat service end to end: real brokers, real replicator and heartbeat processes.

Three clusters of their own (alpha -> bravo -> charlie), so that the fixed-name topics the
service writes (`heartbeats`, `mirrorline-canary`) never reach the shared clusters. One
chain of processes serves every test of the module, in order:

* topology: charlie sees alpha two hops up (via bravo), with fresh heartbeats;
* canary: latency within the SLO while the flow mirrors;
* audit: every closed window of a normally mirrored topic is OK, its copied batches
  verified whole (paired with the source's, not decoded); a second topic is "mirrored"
  by the test itself, batch for batch as the batch path copies, with a batch dropped, one
  written twice and one byte of a value altered (a dropping, duplicating, corrupting
  mirror), which gives MISSING, DUPLICATED and CORRUPTED with the batches' record
  counts; a duplicate written directly into the real remote topic gives DUPLICATED 1;
* restart: the heartbeat service is killed with SIGKILL and restarted; its windows
  resume, no verdict is lost and none is listed twice;
* stopping the alpha->bravo replicator makes the canary VIOLATED and the alpha paths
  stale on bravo and charlie.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import struct
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.errors import MemberIdRequired
from aiokafka.protocol.group import (
    JoinGroupRequest,
    MemberAssignment,
    ProtocolMetadata,
    SyncGroupRequest,
)
from grpc_health.v1 import health_pb2
from helpers import (
    Record,
    consume_all,
    create_topic,
    metric,
    produce,
    raw_batches,
    start_cluster,
    stop_cluster,
    wait_for,
)
from opentelemetry.proto.trace.v1 import trace_pb2
from otlp_receiver import OtlpReceiver, ReceivedSpan
from procs import ServiceProcess, deployment, deployment_config, free_port, mm2_config

from mirrorline.client import heartbeat_paths
from mirrorline.core.batches import crc32c, rewrite, split
from mirrorline.core.canary import CanaryRecord
from mirrorline.core.errors import WireFormatError
from mirrorline.dev.brokers import LocalBroker
from mirrorline.kafka.rawbatches import RawBatches
from mirrorline.v1 import admin_pb2_grpc, heartbeat_pb2

pytestmark = pytest.mark.integration

WINDOW_MS = 1000
GRACE_MS = 5000  # how long the audit waits for the mirror: ample on a loaded machine
SLO_MS = 5000


@dataclass
class Chain:
    brokers: Mapping[str, LocalBroker]
    tmp: Path
    topic: str          # mirrored by the replicator
    faked: str          # "mirrored" by the test
    config: Path        # the heartbeat service's view: both topics
    heartbeat: ServiceProcess
    replicators: dict[str, ServiceProcess]
    otlp: OtlpReceiver  # every process of the chain exports its spans here

    def bootstrap(self, alias: str) -> str:
        return self.brokers[alias].bootstrap

    def stub(self) -> admin_pb2_grpc.AdminStub:
        return admin_pb2_grpc.AdminStub(self.heartbeat.channel)

    async def start_heartbeat(self) -> None:
        port, metrics = free_port(), free_port()
        self.heartbeat = ServiceProcess(
            ["heartbeat", "--config", str(self.config), "--grpc-port", str(port),
             "--metrics-port", str(metrics)], grpc_port=port, metrics_port=metrics,
            log_path=self.tmp / "heartbeat.log", env=self.otlp.env)
        await self.heartbeat.start()
        await self.heartbeat.wait_serving(60)

    async def topology(self, cluster: str) -> heartbeat_pb2.ClusterTopology:
        report = await self.stub().Topology(heartbeat_pb2.TopologyRequest(cluster=cluster),
                                            timeout=10)
        [view] = report.clusters
        return view

    async def canary(self, flow: str) -> heartbeat_pb2.FlowCanaryStatus:
        report = await self.stub().Canary(heartbeat_pb2.CanaryRequest(flow=flow), timeout=10)
        [status] = report.flows
        return status

    async def audit(self, flow: str, topic: str = "") -> heartbeat_pb2.AuditReport:
        report: heartbeat_pb2.AuditReport = await self.stub().Audit(
            heartbeat_pb2.AuditRequest(flow=flow, topic=topic), timeout=10)
        return report



async def assert_clean_sigterm(proc: ServiceProcess) -> None:
    """SIGTERM ends `proc` within seconds, with status 0 and no traceback: nothing (no
    faust consumer thread, no retry loop) is left running to hold the process."""
    started = time.monotonic()
    await proc.signal(signal.SIGTERM)
    code = await proc.wait(30)
    took = time.monotonic() - started
    log = proc.log_tail(400)
    assert code == 0, log
    assert took < 15, f"took {took:.1f}s to stop:\n{log}"
    assert "Traceback" not in log and "never awaited" not in log, log
    # Nothing left in its working directory (faust's data directory went there once).
    left = sorted(p.name for p in proc.cwd.iterdir()) if proc.cwd is not None else []
    assert not left, f"left in its working directory: {left}"


def heartbeat_service(tmp_path: Path, name: str, config_text: str) -> ServiceProcess:
    """A `mirrorline heartbeat` process (not started) on `config_text`, logging to
    `<name>.log`, in an empty working directory of its own (`assert_clean_sigterm` checks
    it is left empty)."""
    config = tmp_path / f"{name}.properties"
    config.write_text(config_text)
    port = free_port()
    cwd = tmp_path / f"{name}-cwd"
    cwd.mkdir()
    return ServiceProcess(["heartbeat", "--config", str(config), "--grpc-port", str(port),
                           "--metrics-port", "-1"], grpc_port=port,
                          log_path=tmp_path / f"{name}.log", cwd=cwd)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mirrorline", *args], capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.fixture(scope="module")
async def chain(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Chain]:
    tmp = tmp_path_factory.mktemp("heartbeat")
    brokers = dict(zip(("alpha", "bravo", "charlie"), await asyncio.gather(
        *(start_cluster(alias, tmp / alias) for alias in ("alpha", "bravo", "charlie"))),
        strict=True))
    topic, faked = "orders", "payments"
    await create_topic(brokers["alpha"].bootstrap, topic, 2)
    await create_topic(brokers["alpha"].bootstrap, faked, 3)
    await create_topic(brokers["bravo"].bootstrap, f"alpha.{faked}", 3)
    common = {"refresh_topics_interval_seconds": "1", "emit_heartbeats_interval_seconds": "1",
              "canary_interval_ms": "250", "canary_latency_slo_ms": str(SLO_MS),
              "audit_window_ms": str(WINDOW_MS), "audit_grace_ms": str(GRACE_MS),
              # The test's own "mirror" drops the last record of an idle partition.
              "audit_missing_after_ms": str(WINDOW_MS)}
    # The replicators copy `orders` only; the heartbeat service audits both topics.
    mirrored = mm2_config(brokers, {"alpha->bravo": {"topics": topic},
                                    "bravo->charlie": {"topics": topic}}, **common)
    audited = mm2_config(brokers, {"alpha->bravo": {"topics": f"{topic}, {faked}"},
                                   "bravo->charlie": {"topics": topic}}, **common)
    (tmp / "mirrored.properties").write_text(mirrored)
    config = tmp / "audited.properties"
    config.write_text(audited)
    replicators: dict[str, ServiceProcess] = {}
    otlp = OtlpReceiver()
    await otlp.start()
    chain = Chain(brokers, tmp, topic, faked, config, None, replicators,  # type: ignore[arg-type]
                  otlp)
    try:
        for target in ("bravo", "charlie"):
            port = free_port()
            proc = ServiceProcess(
                ["replicator", "--config", str(tmp / "mirrored.properties"), "--clusters",
                 target, "--grpc-port", str(port), "--metrics-port", "-1", "--worker-id",
                 f"to-{target}"], grpc_port=port, log_path=tmp / f"replicator-{target}.log",
                env=otlp.env)
            await proc.start()
            replicators[target] = proc
        await asyncio.gather(*(p.wait_serving(60) for p in replicators.values()))
        await chain.start_heartbeat()
        yield chain
    finally:
        for proc in [*replicators.values(), *([chain.heartbeat] if chain.heartbeat else [])]:
            with contextlib.suppress(Exception):
                await proc.close()
        await otlp.stop()
        await asyncio.gather(*(stop_cluster(b) for b in brokers.values()))


async def test_topology_shows_alpha_two_hops_up_from_charlie(chain: Chain) -> None:
    # Someone else's record in a heartbeat topic and in the remote canary: reported once
    # (topic, partition, offset) and skipped. A reader starts a couple of records before a
    # heartbeat topic's end (it wants the newest), so the record is written once bravo's
    # reader follows alpha's heartbeats; a backlog copied at once could start after it.
    async def bravo_follows_alpha() -> bool:
        view = await chain.topology("bravo")
        return any(list(p.route) == ["alpha"] and not p.stale for p in view.paths)

    await wait_for(bravo_follows_alpha, 60, "bravo never saw fresh heartbeats from alpha")
    [garbage] = await produce(chain.bootstrap("alpha"), "heartbeats",
                              [Record(b"\x01", key=b"not a heartbeat", partition=0)])
    await consume_all(chain.bootstrap("bravo"), "alpha.mirrorline-canary", expected=1)
    [bad_canary] = await produce(chain.bootstrap("bravo"), "alpha.mirrorline-canary",
                                 [Record(b"junk", partition=0)])

    async def two_hops() -> bool:
        view = await chain.topology("charlie")
        return any(list(p.route) == ["alpha", "bravo"] and not p.stale for p in view.paths)

    await wait_for(two_hops, 60, "charlie never saw fresh heartbeats from alpha via bravo")
    view = await chain.topology("charlie")
    assert set(view.upstream) == {"alpha", "bravo"}
    hops = {p.route[0]: p.hops for p in view.paths if not p.stale}
    assert hops == {"alpha": 2, "bravo": 1}
    shown = cli("admin", "--server", f"127.0.0.1:{chain.heartbeat.grpc_port}", "topology",
                "--cluster", "charlie")
    assert shown.returncode == 0, shown.stderr
    line = next(ln for ln in shown.stdout.splitlines() if "alpha -> bravo -> charlie" in ln)
    assert line.split()[1:3] == ["alpha", "2"] and line.rstrip().endswith("ok")

    # mirrorline.client gives the same reading, straight from the cluster.
    paths = await heartbeat_paths({"bootstrap.servers": chain.bootstrap("charlie")},
                                  "charlie")
    assert {(p.origin, p.hops, p.stale) for p in paths} == {("alpha", 2, False),
                                                             ("bravo", 1, False)}

    wanted = [f"topic alpha.heartbeats partition 0 offset {garbage.offset}",
              f"topic alpha.mirrorline-canary partition 0 offset {bad_canary.offset}"]

    async def reported() -> bool:
        log = chain.heartbeat.log_tail(10_000)
        return all(w in log for w in wanted)

    await wait_for(reported, 30, f"malformed records were not reported: {wanted}")
    log = chain.heartbeat.log_tail(10_000)
    assert log.count(f"topic alpha.heartbeats partition 0 offset {garbage.offset}:") == 1
    assert log.count(f"alpha.mirrorline-canary partition 0 offset {bad_canary.offset}:") == 1


async def test_canary_within_the_slo_while_mirroring(chain: Chain) -> None:
    async def ok() -> bool:
        return (await chain.canary("alpha->bravo")).health == "OK"

    await wait_for(ok, 60, "the alpha->bravo canary never reported OK")
    status = await chain.canary("alpha->bravo")
    assert 0 <= status.p50_ms <= status.p99_ms <= status.max_ms <= SLO_MS
    assert status.samples > 0 and status.lost == 0 and status.duplicated == 0
    assert status.topic == "alpha.mirrorline-canary"
    # One partition per source broker (alpha has one), each with its own latency.
    assert [p.partition for p in status.by_partition] == [0] and status.partitions == 1
    metrics = await chain.heartbeat.scrape()
    for name in ("canary_latency_ms_p50{", "canary_latency_ms_p99{", "canary_health{",
                 "heartbeat_age_ms{"):
        assert name in metrics, name
    assert metric(metrics, "canary_health", source="alpha", target="bravo") == 1.0  # OK


def _attribute(span: trace_pb2.Span, key: str) -> str | int | None:
    for attribute in span.attributes:
        if attribute.key == key:
            value = attribute.value
            return value.string_value if value.HasField("string_value") else value.int_value
    return None


def _canary_trace(spans: list[ReceivedSpan]) -> tuple[ReceivedSpan, ...] | None:
    """(publish, replicator batch, arrival) of one canary, if all three were exported."""
    arrivals = {(s.span.trace_id, s.span.parent_span_id): s for s in spans
                if s.service == "mirrorline-heartbeat"
                and s.span.name == "alpha.mirrorline-canary process"}
    batches = {(link.trace_id, link.span_id): s for s in spans
               if s.service == "mirrorline-replicator"
               and _attribute(s.span, "mirrorline.flow") == "alpha->bravo"
               for link in s.span.links}
    for s in spans:
        if s.service == "mirrorline-heartbeat" and s.span.name == "mirrorline-canary publish":
            key = (s.span.trace_id, s.span.span_id)
            if key in arrivals and key in batches:
                return s, batches[key], arrivals[key]
    return None


async def test_one_trace_follows_a_canary_through_replication(chain: Chain) -> None:
    """Through real processes and a real OTLP/gRPC receiver: the heartbeat service's
    canary publish span, the replicator's batch span linking to it (a link, in a trace of
    its own, as the messaging conventions say) and the canary's arrival span, a child of
    the publish span in the same trace (the trace context travels in the record)."""
    async def traced() -> bool:
        return _canary_trace(list(chain.otlp.spans)) is not None

    await wait_for(traced, 60, "no canary trace reached the OTLP receiver")
    found = _canary_trace(list(chain.otlp.spans))
    assert found is not None
    publish, batch, arrival = found
    assert publish.span.kind == trace_pb2.Span.SPAN_KIND_PRODUCER
    assert _attribute(publish.span, "messaging.destination.name") == "mirrorline-canary"
    assert batch.span.name == "produce"
    assert _attribute(batch.span, "messaging.destination.name") == "alpha.mirrorline-canary"
    assert _attribute(batch.span, "mirrorline.flow") == "alpha->bravo"
    assert batch.span.trace_id != publish.span.trace_id  # linked, not parented
    assert arrival.span.kind == trace_pb2.Span.SPAN_KIND_CONSUMER
    assert arrival.span.trace_id == publish.span.trace_id
    assert _attribute(arrival.span, "mirrorline.flow") == "alpha->bravo"
    assert arrival.span.start_time_unix_nano >= publish.span.start_time_unix_nano


def _verdicts(report: heartbeat_pb2.AuditReport) -> dict[tuple[int, int], str]:
    return {(w.partition, w.window_start_ms): f"{w.verdict} {w.count}" if w.count
            else w.verdict for w in report.windows}


async def test_audit_ok_while_mirroring_and_faults_with_counts(chain: Chain) -> None:
    alpha, bravo = chain.bootstrap("alpha"), chain.bootstrap("bravo")
    # A window a few seconds ahead, so that the audit (started already) covers it whole.
    base = (int(time.time() * 1000) // WINDOW_MS + 3) * WINDOW_MS
    # Batches of 20 records a partition: the replicator copies them as they are.
    mirrored = [Record(f"m{i}".encode(), key=f"k{i}".encode(), partition=i % 2,
                       headers=[("h", b"1")], timestamp_ms=base + i) for i in range(40)]
    await produce(alpha, chain.topic, mirrored)
    # A duplicate written straight into the real remote topic, in a window of its own.
    extra = Record(b"dup", key=b"kd", partition=0, timestamp_ms=base + 2 * WINDOW_MS)
    await produce(alpha, chain.topic, [extra])
    await consume_all(bravo, f"alpha.{chain.topic}", expected=1)  # mirroring runs
    await produce(bravo, f"alpha.{chain.topic}", [extra])

    # The test's own faulty "mirror" of the second topic, batch for batch as the batch
    # path copies: partition 0 loses its last batch, partition 1 gets its first twice,
    # partition 2's first has one byte of a value altered (its CRC made to fit).
    source = [Record(f"p{p}-{i}".encode(), key=f"k{i}".encode(), partition=p,
                     timestamp_ms=base + 10 * p + i) for p in range(3) for i in range(12)]
    await produce(alpha, chain.faked, source)
    lost = await _copy_batches(alpha, bravo, chain.faked, drop_last=True, partition=0)
    repeated = await _copy_batches(alpha, bravo, chain.faked, repeat_first=True,
                                   partition=1)
    await _copy_batches(alpha, bravo, chain.faked, alter_first=True, partition=2)

    async def judged() -> bool:
        real = _verdicts(await chain.audit("alpha->bravo", chain.topic))
        fake = _verdicts(await chain.audit("alpha->bravo", chain.faked))
        return {(0, base), (1, base), (0, base + 2 * WINDOW_MS)} <= set(real) and \
            {(0, base), (1, base), (2, base)} <= set(fake)

    await wait_for(judged, 90, "the audit never judged the test's windows")
    real = _verdicts(await chain.audit("alpha->bravo", chain.topic))
    assert real[(0, base)] == "OK" and real[(1, base)] == "OK"
    assert real[(0, base + 2 * WINDOW_MS)] == "DUPLICATED 1"
    fake = _verdicts(await chain.audit("alpha->bravo", chain.faked))
    assert fake == {(0, base): f"MISSING {lost}", (1, base): f"DUPLICATED {repeated}",
                    (2, base): "CORRUPTED"}
    # Everything else the audit judged on the mirrored topic (canary, heartbeats) is OK.
    others = {k: v for k, v in real.items() if k != (0, base + 2 * WINDOW_MS)}
    assert set(others.values()) == {"OK"}

    shown = cli("admin", "--server", f"127.0.0.1:{chain.heartbeat.grpc_port}", "audit",
                "alpha->bravo", "--topic", chain.faked, "--output", "json")
    assert shown.returncode == 0, shown.stderr
    windows = json.loads(shown.stdout)["windows"]
    assert sorted(w["verdict"] for w in windows) == ["CORRUPTED", "DUPLICATED", "MISSING"]
    totals = (await chain.audit("alpha->bravo")).totals
    # Duplicates: one in `orders`, a batch in `payments`, and the junk record the
    # topology test wrote straight into the remote canary topic.
    assert totals.missing_records == lost and totals.duplicated_records == repeated + 2
    metrics = await chain.heartbeat.scrape()
    assert metric(metrics, "audit_windows_total", source="alpha", target="bravo",
                  verdict="CORRUPTED") == 1.0
    # The replicator's copies of `orders` (two batches of 20) and the intact copies of
    # `payments` were verified whole on both sides, without decoding their records.
    for side in ("source", "target"):
        whole = metric(metrics, "audit_whole_batches_total", source="alpha", target="bravo",
                       side=side)
        assert whole is not None and whole >= 2, (side, whole)


async def _copy_batches(source: str, target: str, topic: str, *, partition: int,
                        drop_last: bool = False, repeat_first: bool = False,
                        alter_first: bool = False) -> int:
    """Copy `topic`-`partition` to its remote topic batch by batch, as the batch path does
    (`rewrite`: a producer's header, the records section as it is), with the fault asked
    for; returns the record count of the batch dropped or repeated."""
    batches = [b for data in await raw_batches(source, topic, partition)
               for b in split(data).batches]
    counts = [b.header.record_count for b in batches if b.header is not None]
    copies = [bytearray(rewrite(b)) for b in batches]
    if drop_last:
        copies.pop()
    if repeat_first:
        copies.append(bytearray(copies[0]))
    if alter_first:
        at = copies[0].index(f"p{partition}-".encode())
        copies[0][at] ^= 0x01
        struct.pack_into(">I", copies[0], 17, crc32c(memoryview(copies[0])[21:]))
    client = AIOKafkaClient(bootstrap_servers=target)
    await client.bootstrap()
    try:
        raw = RawBatches(client)
        for data in copies:
            await raw.produce(TopicPartition(f"alpha.{topic}", partition), data)
    finally:
        await client.close()
    return counts[-1] if drop_last else counts[0] if repeat_first else 0


async def _repeat_a_canary(chain: Chain, record: Record | None = None) -> Record:
    """Write a canary already mirrored once more straight into the remote canary topic (a
    duplicating mirror); returns the record written."""
    if record is None:
        consumed = await consume_all(chain.bootstrap("bravo"), "alpha.mirrorline-canary")
        valid = []
        for r in consumed[0]:
            with contextlib.suppress(WireFormatError):
                CanaryRecord.decode(r.value)
                valid.append(r)
        record = Record.of(valid[-1])
    await produce(chain.bootstrap("bravo"), "alpha.mirrorline-canary", [record])
    return record


async def _canary_totals(chain: Chain, at_least_duplicated: int) -> tuple[int, int]:
    async def counted() -> bool:
        status = await chain.canary("alpha->bravo")
        return status.duplicated_total >= at_least_duplicated and status.health != "UNKNOWN"

    await wait_for(counted, 60, f"the canary never counted {at_least_duplicated} duplicates")
    status = await chain.canary("alpha->bravo")
    return status.lost_total, status.duplicated_total


async def test_sigkill_and_restart_resumes_windows_without_loss_or_repeats(chain: Chain
                                                                          ) -> None:
    """The audit's windows and the canary's (its faust table) both survive a SIGKILL: no
    verdict lost or listed twice, the canary's lost/duplicated counts are not reset, no
    canary is taken for lost after the restart, and a canary from before the kill that
    arrives again afterwards is still known as a repeat."""
    alpha = chain.bootstrap("alpha")
    _, duplicated = await _canary_totals(chain, 0)
    repeated = await _repeat_a_canary(chain)
    lost_before, duplicated_before = await _canary_totals(chain, duplicated + 1)
    assert lost_before == 0
    before = (await chain.audit("alpha->bravo", chain.topic)).windows
    judged_before = {(w.partition, w.window_start_ms) for w in before}
    await chain.heartbeat.signal(signal.SIGKILL)
    await chain.heartbeat.wait()
    await chain.heartbeat.close()
    # Records written while the service is down, in windows it has not judged.
    base = (int(time.time() * 1000) // WINDOW_MS + 1) * WINDOW_MS
    during = [Record(f"d{i}".encode(), partition=i % 2, timestamp_ms=base + i)
              for i in range(10)]
    await produce(alpha, chain.topic, during)
    await chain.start_heartbeat()
    after_base = (int(time.time() * 1000) // WINDOW_MS + 2) * WINDOW_MS
    later = [Record(f"a{i}".encode(), partition=i % 2, timestamp_ms=after_base + i)
             for i in range(10)]
    await produce(alpha, chain.topic, later)

    async def resumed() -> bool:
        got = _verdicts(await chain.audit("alpha->bravo", chain.topic))
        return all((p, b) in got for p in (0, 1) for b in (base, after_base))

    await wait_for(resumed, 90, "windows after the restart were never judged")
    windows = (await chain.audit("alpha->bravo", chain.topic)).windows
    keys = [(w.partition, w.window_start_ms) for w in windows]
    assert len(keys) == len(set(keys)), "a window is listed twice"
    assert judged_before <= set(keys), "a verdict from before the kill was lost"
    got = _verdicts(await chain.audit("alpha->bravo", chain.topic))
    for p in (0, 1):
        assert got[(p, base)] == "OK" and got[(p, after_base)] == "OK"

    # The canary resumed its table: counts kept, nothing lost across the restart ...
    async def canary_ok() -> bool:
        return (await chain.canary("alpha->bravo")).health == "OK"

    await wait_for(canary_ok, 60, "the canary never reported OK after the restart")
    status = await chain.canary("alpha->bravo")
    assert (status.lost_total, status.duplicated_total) == (0, duplicated_before)
    # ... and the sequences it saw before the kill: the same old canary again is a repeat.
    await _repeat_a_canary(chain, repeated)
    assert await _canary_totals(chain, duplicated_before + 1) == (0, duplicated_before + 1)


async def test_stopped_flow_violates_the_canary_and_stales_its_paths(chain: Chain) -> None:
    await chain.replicators["bravo"].close()

    async def violated() -> bool:
        return (await chain.canary("alpha->bravo")).health == "VIOLATED"

    await wait_for(violated, 60, "the canary of a stopped flow never reported VIOLATED")
    assert "has not arrived" in (await chain.canary("alpha->bravo")).reason

    async def stale() -> bool:
        view = await chain.topology("charlie")
        return all(p.stale for p in view.paths if p.route[0] == "alpha")

    await wait_for(stale, 60, "the alpha path on charlie never went stale")
    view = await chain.topology("charlie")
    path = next(p for p in view.paths if p.route[0] == "alpha")
    assert path.stale and "old" in path.reason
    fresh = next(p for p in view.paths if list(p.route) == ["bravo"])
    assert not fresh.stale  # bravo -> charlie still runs


async def test_bad_keys_exit_2_naming_key_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.properties"
    path.write_text("clusters = a, b\na.bootstrap.servers = 127.0.0.1:1\n"
                    "b.bootstrap.servers = 127.0.0.1:2\na->b.enabled = true\n"
                    "canary.latency.slo.ms = 0\n")
    done = cli("heartbeat", "--config", str(path), "--grpc-port", "0", "--metrics-port", "-1")
    assert done.returncode == 2
    assert "bad.properties:5: canary.latency.slo.ms" in done.stderr



async def _healths_until_ok(stub: admin_pb2_grpc.AdminStub, flow: str,
                            seen: list[str]) -> None:
    """Every canary health of `flow` the service reports, in order, until the first OK."""
    while not seen or seen[-1] != "OK":
        with contextlib.suppress(Exception):  # not serving yet
            report = await stub.Canary(heartbeat_pb2.CanaryRequest(flow=flow), timeout=5)
            if not seen or seen[-1] != report.flows[0].health:
                seen.append(report.flows[0].health)
        await asyncio.sleep(0.1)


async def test_controller_forwards_and_a_paused_flow_violates_the_canary(
        chain: Chain, tmp_path: Path) -> None:
    """A controller-run deployment (charlie -> alpha, one worker) with a managed heartbeat
    service: the controller's Admin API answers `topology`, `canary` and `audit` by
    forwarding, `status` carries the audit totals, and pausing the flow turns its canary
    from OK to VIOLATED. The managed service follows the control log: a flow created
    through the API gets its canary without a restart.

    No false alarms: the service starts while the mirror does not carry its canary yet
    (the flow is paused until its first canary is older than the SLO, as when the
    replicator has yet to find a new canary topic), and its canary goes from UNKNOWN
    straight to OK. After a pause longer than the audit's window and grace and a resume,
    the records that waited are LATE, never MISSING."""
    # The canary topic exists before the controller's first topic listing (so the flow
    # takes it at resume); no later refresh within the test.
    await create_topic(chain.bootstrap("charlie"), "mirrorline-canary", 1)
    config = deployment_config({a: chain.brokers[a] for a in ("charlie", "alpha")},
                               {"charlie->alpha": {"topics": "nothing-here"}},
                               audit_window_ms="1000", audit_grace_ms="1000",
                               canary_interval_ms="250", canary_latency_slo_ms=str(SLO_MS))
    async with deployment(config, tmp_path) as d:
        controller = await d.controller()
        server = f"127.0.0.1:{controller.grpc_port}"
        paused = cli("admin", "--server", server, "flows", "pause", "charlie->alpha")
        assert paused.returncode == 0, paused.stderr
        await d.worker("w1")
        port = free_port()
        managed = ServiceProcess(
            ["heartbeat", "--managed", "--config", str(d.path), "--grpc-port", str(port),
             "--metrics-port", "-1", "--instance-id", "hb-managed"], grpc_port=port,
            log_path=tmp_path / "hb-managed.log")
        await managed.start()
        healths: list[str] = []
        watching = asyncio.create_task(_healths_until_ok(
            admin_pb2_grpc.AdminStub(managed.channel), "charlie->alpha", healths))
        try:

            async def forwarded() -> bool:
                done = cli("admin", "--server", server, "topology", "--cluster", "charlie")
                return done.returncode == 0 and "alpha -> bravo -> charlie" in done.stdout

            await wait_for(forwarded, 60, "the controller never forwarded Topology")
            audit = cli("admin", "--server", server, "audit", "charlie->alpha")
            assert audit.returncode == 0, audit.stderr
            assert "charlie->alpha: windows" in audit.stdout

            async def totals() -> bool:
                return any(a.flow == "charlie->alpha" for a in (await d.status()).audit)

            await wait_for(totals, 30, "status never carried the audit totals")
            shown = cli("admin", "--server", server, "status")
            assert shown.returncode == 0 and "AUDIT WINDOWS" in shown.stdout

            def health() -> str:
                done = cli("admin", "--server", server, "canary", "--flow", "charlie->alpha",
                           "--output", "json")
                return str(json.loads(done.stdout)["flows"][0]["health"]) \
                    if done.returncode == 0 else ""

            async def first_canary_overdue() -> bool:
                sent = await consume_all(chain.bootstrap("charlie"), "mirrorline-canary")
                first = CanaryRecord.decode(sent[0][0].value) if sent.get(0) else None
                return first is not None and time.time() * 1000 - first.sent_ms > SLO_MS

            await wait_for(first_canary_overdue, 60, "the service never sent a canary")
            # (In a thread: the health watcher keeps polling meanwhile.)
            resumed = await asyncio.to_thread(cli, "admin", "--server", server, "flows",
                                              "resume", "charlie->alpha")
            assert resumed.returncode == 0, resumed.stderr
            await asyncio.wait_for(watching, 90)  # until the first OK
            assert set(healths) == {"UNKNOWN", "OK"}, healths  # no alarm while starting

            async def ok() -> bool:  # as the controller forwards it
                return health() == "OK"

            await wait_for(ok, 60, "the controller never forwarded the canary's OK")

            paused = cli("admin", "--server", server, "flows", "pause", "charlie->alpha")
            assert paused.returncode == 0, paused.stderr
            paused_ms = int(time.time() * 1000)

            async def violated() -> bool:
                return health() == "VIOLATED"

            await wait_for(violated, 60, "the canary of a paused flow never reported VIOLATED")
            resumed = cli("admin", "--server", server, "flows", "resume", "charlie->alpha")
            assert resumed.returncode == 0, resumed.stderr
            resumed_ms = int(time.time() * 1000)

            def verdicts() -> list[dict[str, object]]:
                done = cli("admin", "--server", server, "audit", "charlie->alpha",
                           "--output", "json")
                assert done.returncode == 0, done.stderr
                found: list[dict[str, object]] = json.loads(done.stdout)["windows"]
                return found

            async def judged_past_the_pause() -> bool:
                return any(int(str(w["window_start_ms"])) >= resumed_ms for w in verdicts())

            await wait_for(judged_past_the_pause, 60, "the audit never judged past the pause")
            during = [w for w in verdicts() if paused_ms <= int(str(w["window_end_ms"]))
                      and int(str(w["window_start_ms"])) < resumed_ms]
            assert during and {w["verdict"] for w in during} <= {"OK", "LATE"}, during
            assert any(w["verdict"] == "LATE" for w in during), during

            # A flow created through the Admin API is probed without a restart.
            created = cli("admin", "--server", server, "flows", "create", "alpha->charlie",
                          "--topics", "nothing-here")
            assert created.returncode == 0, created.stderr

            async def probed() -> bool:
                done = cli("admin", "--server", server, "canary", "--output", "json")
                return done.returncode == 0 and any(
                    f["flow"] == "alpha->charlie" for f in json.loads(done.stdout)["flows"])

            await wait_for(probed, 30, "a flow created live never got a canary")
            # Running (faust apps started, managed, following the control log): SIGTERM
            # ends it cleanly.
            await assert_clean_sigterm(managed)
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
            await managed.close()


async def test_unreachable_cluster_is_never_ok_and_sigterm_stops_quickly(
        chain: Chain, tmp_path: Path) -> None:
    """A flow into a cluster nobody listens on: its paths and canary are unknown with the
    reason, the service keeps serving what it can and stops within seconds."""
    dead = f"127.0.0.1:{free_port()}"
    proc = heartbeat_service(tmp_path, "dead", mm2_config(
        {"alpha": chain.brokers["alpha"], "nowhere": dead}, {"alpha->nowhere": {}},
        canary_interval_ms="250", audit_window_ms="1000"))
    await proc.start()
    try:
        stub = admin_pb2_grpc.AdminStub(proc.channel)

        async def known() -> bool:
            with contextlib.suppress(Exception):
                report = await stub.Topology(heartbeat_pb2.TopologyRequest(), timeout=5)
                views = {c.cluster: c for c in report.clusters}
                return views["alpha"].reachable and not views["nowhere"].reachable
            return False

        await wait_for(known, 60, "the topology never told the reachable from the dead")
        report = await stub.Topology(heartbeat_pb2.TopologyRequest(cluster="nowhere"),
                                     timeout=5)
        # the kind of failure and the address, as every unreachable cluster is told
        assert report.clusters[0].error.startswith("connection refused: ")
        assert dead in report.clusters[0].error
        canary = (await stub.Canary(heartbeat_pb2.CanaryRequest(flow="alpha->nowhere"),
                                    timeout=5)).flows[0]
        assert canary.health == "UNKNOWN" and "'nowhere' unreachable" in canary.reason
        audit = await stub.Audit(heartbeat_pb2.AuditRequest(flow="alpha->nowhere"), timeout=5)
        assert "unreachable" in audit.totals.error and not audit.windows
        await assert_clean_sigterm(proc)
        log = proc.log_tail(200)
        assert log.count("'nowhere' unreachable for heartbeats") == 1  # said once, not per retry
    finally:
        await proc.close()


async def hold_group(bootstrap: str, group: str) -> AIOKafkaClient:
    """Join consumer group `group` as a member that then goes silent: it neither
    heartbeats nor rejoins, so until its session (45 s) or rebalance time (60 s) runs out,
    the join of any other member waits for it. Returns the client to close afterwards."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    node = await client.coordinator_lookup(CoordinationType.GROUP, group)
    # faust's assignor: a member of another protocol would be refused, not waited for
    protocols = [("faust", ProtocolMetadata(0, [], b"").encode())]
    member = JoinGroupRequest.UNKNOWN_MEMBER_ID
    while True:
        joined = await client.send(node, JoinGroupRequest(
            group, 45_000, 60_000, member, None, "consumer", protocols))
        if joined.error_code != MemberIdRequired.errno:
            break
        member = joined.member_id  # KIP-394: join again with the id the broker gave
    assert joined.error_code == 0, joined
    synced = await client.send(node, SyncGroupRequest(
        group, joined.generation_id, joined.member_id, None,
        [(joined.member_id, MemberAssignment(0, [], b"").encode())]))
    assert synced.error_code == 0, synced
    return client


async def group_state(bootstrap: str, group: str) -> str:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [described] = await admin.describe_consumer_groups([group])
        return str(described.groups[0][2])
    finally:
        await admin.close()


async def test_sigterm_while_the_audit_is_still_starting(chain: Chain, tmp_path: Path) -> None:
    """SIGTERM while the audit's faust app is joining its group -- held there by a member
    that stays silent, so the state cannot pass before the signal -- ends the process
    cleanly all the same."""
    charlie = chain.bootstrap("charlie")
    group = "mirrorline-early-heartbeat-charlie"  # the faust app's group
    squatter = await hold_group(charlie, group)
    proc = heartbeat_service(tmp_path, "early", mm2_config(
        {a: chain.brokers[a] for a in ("alpha", "charlie")},
        {"alpha->charlie": {"topics": "nothing-here"}}, mirrorline_deployment="early"))
    try:
        await proc.start()

        async def joining() -> bool:
            return await group_state(charlie, group) == "PreparingRebalance"

        await wait_for(joining, 60, "the faust app never asked to join its group")
        # Answering, and not serving: its audit is still waiting to join.
        assert await proc.health() == health_pb2.HealthCheckResponse.NOT_SERVING
        await assert_clean_sigterm(proc)
    finally:
        await proc.close()
        await squatter.close()


async def test_sigterm_after_the_target_went_down_while_running(chain: Chain,
                                                                tmp_path: Path) -> None:
    """Running (its faust app joined on the target), then the target cluster dies: SIGTERM
    still ends the service within seconds, with status 0 and no traceback -- faust's
    consumer thread, stuck on the dead cluster, no longer holds the process."""
    delta = await start_cluster("delta", tmp_path / "delta")
    proc = heartbeat_service(tmp_path, "down", mm2_config(
        {"alpha": chain.brokers["alpha"], "delta": delta},
        {"alpha->delta": {"topics": "nothing-here"}}, canary_interval_ms="250",
        audit_window_ms="1000", mirrorline_deployment="down"))
    await proc.start()
    try:
        await proc.wait_serving(60)  # SERVING: every part, the faust app included, runs
        await stop_cluster(delta)

        async def noticed() -> bool:
            return await proc.health() != health_pb2.HealthCheckResponse.SERVING

        await wait_for(noticed, 60, "the service never noticed its target went down")
        await assert_clean_sigterm(proc)
    finally:
        await proc.close()
        await stop_cluster(delta)
