"""`mirrorline run --spark` as a user starts it: controller, a replicator worker and a Spark
executor (local[2]) beside them, on real brokers, with the gRPC security of a production
deployment (mutual TLS required, certificates and tokens from `deploy/make-certs.sh`, as
docker-compose uses them).

One `run` (so one Spark start-up, the expensive part) serves every scenario of this module,
in order: a flow pinned to Spark mirrors through the executor; a record its target refuses
stops that partition only; offloading triggered by measured load and by backlog (handed
back below the reclaim threshold), all copied by one query; an executor cut off from the
controller fences itself; and, last because it makes the executor give back all its
partitions, a Spark query that fails for real.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import ipaddress
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from helpers import Record, consume_all, create_topic, produce, wait_for
from procs import QUIET_SHARED_CLUSTERS, mm2_config

from mirrorline import grpcsecure
from mirrorline.dev.brokers import LocalBroker
from mirrorline.grpcsecure import ClientCredentials
from mirrorline.ports import GRPC_PORTS, METRICS_PORTS
from mirrorline.v1 import admin_pb2, admin_pb2_grpc, flows_pb2

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[2]
RUNNING = flows_pb2.PARTITION_STATE_RUNNING
ERROR = flows_pb2.PARTITION_STATE_ERROR
EXECUTOR = "spark:0"
#: The executor's one streaming query.
QUERY = "mirrorline_spark_0"
WORKER = "replicator-0"
#: The target of the pinned flow takes records up to this size (max.request.size).
LIMIT = 20_000


@dataclass
class Run:
    """The running `mirrorline run --spark` and the names of its three flows."""

    proc: asyncio.subprocess.Process
    admin: admin_pb2_grpc.AdminStub
    #: host:port of the controller, and the certificates of the people using it.
    server: str
    certs: Path
    metrics_port: int
    tmp: Path
    log: Path
    #: (source alias, target alias, topic) per flow: pinned to Spark, offloaded by
    #: backlog, offloaded by load.
    pinned: tuple[str, str, str]
    backlog: tuple[str, str, str]
    load: tuple[str, str, str]

    async def status(self) -> admin_pb2.StatusReport:
        report: admin_pb2.StatusReport = await self.admin.GetStatus(
            admin_pb2.GetStatusRequest(), timeout=5)
        return report

    async def partitions(self, topic: str) -> dict[int, flows_pb2.PartitionStatus]:
        try:
            report = await self.status()
        except grpc.aio.AioRpcError:
            return {}  # the controller is still starting or electing itself
        return {p.partition: p for p in report.partitions if p.source_topic == topic}

    async def wait_owned(self, topic: str, partitions: Sequence[int], owner: str,
                         what: str, timeout: float = 120.0) -> None:
        async def owned() -> bool:
            now = await self.partitions(topic)
            return all(p in now and now[p].worker_id == owner and now[p].state == RUNNING
                       for p in partitions)
        await wait_for(owned, timeout, f"{what}\n{self.tail()}", interval=0.5)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _children(pid: int) -> dict[int, str]:
    """The `mirrorline` subcommands the run's children execute, by pid."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    out = {}
    for child in (path.read_text().split() if path.exists() else []):
        try:
            args = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except FileNotFoundError:
            continue
        if b"mirrorline" in args:
            out[int(child)] = args[args.index(b"mirrorline") + 1].decode()
    return out


@pytest.fixture(scope="module")
async def run(primary: LocalBroker, backup: LocalBroker,
              tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Run]:
    tmp = tmp_path_factory.mktemp("spark-run")
    tag = secrets.token_hex(3)
    pinned = (f"p{tag}", f"q{tag}", f"t{tag}-pinned")
    backlog = (f"r{tag}", f"s{tag}", f"t{tag}-backlog")
    load = (f"u{tag}", f"v{tag}", f"t{tag}-load")
    await create_topic(primary.bootstrap, pinned[2], 2)
    await create_topic(primary.bootstrap, backlog[2], 1)
    await create_topic(primary.bootstrap, load[2], 1)
    common = {"refresh.topics.interval.seconds": "1", "sync.topic.configs.enabled": "false",
              "sync.topic.acls.enabled": "false", "emit.checkpoints.enabled": "false"}
    flows = {
        f"{pinned[0]}->{pinned[1]}": {**common, "topics": pinned[2],
                                      "mirrorline.executor": "spark"},
        # Offload on backlog only; hand back once nearly caught up.
        f"{backlog[0]}->{backlog[1]}": {**common, "topics": backlog[2],
                                        "mirrorline.spark.offload.bytes.per.second": "0",
                                        "mirrorline.spark.offload.lag.records": "300",
                                        "mirrorline.spark.reclaim.lag.records": "50"},
        # Offload on sustained load only.
        f"{load[0]}->{load[1]}": {**common, "topics": load[2],
                                  "mirrorline.spark.offload.bytes.per.second": "200",
                                  "mirrorline.spark.offload.sustain.seconds": "2",
                                  "mirrorline.spark.offload.lag.records": "0"},
    }
    clusters = {pinned[0]: primary, pinned[1]: backup, backlog[0]: primary,
                backlog[1]: backup, load[0]: primary, load[1]: backup}
    certs = tmp / "certs"
    await asyncio.to_thread(subprocess.run, ["sh", str(ROOT / "deploy" / "make-certs.sh"),
                                             str(certs)], check=True, capture_output=True)
    config = tmp / "mm2.properties"
    config.write_text(mm2_config(
        clusters, flows, mirrorline_deployment=f"d{tag}", **QUIET_SHARED_CLUSTERS,
        mirrorline_grpc_tls_certificate=str(certs / "service.pem"),
        mirrorline_grpc_tls_key=str(certs / "service.key"),
        mirrorline_grpc_tls_ca=str(certs / "ca.pem"),
        mirrorline_grpc_tls_client_auth_required="true",
        mirrorline_admin_tokens_file=str(certs / "tokens.txt"))
        + f"{pinned[1]}.producer.max.request.size = {LIMIT}\n")
    # Fixed ports (base + offset, as `run` assigns them), below the ephemeral range.
    offset = 14000 + secrets.randbelow(60) * 100
    spark_tmp = tmp / "spark-tmp"
    spark_tmp.mkdir()
    log = tmp / "run.log"
    # The default lease (6 s): nothing here waits for one to run out, and a 2 s lease
    # (heartbeat timeouts of 0.5 s) fences busy services on a loaded 2-core machine.
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mirrorline", "run", "--config", str(config),
            "--workers", "1", "--spark", "--spark-master", "local[2]",
            "--port-offset", str(offset), "--lease-ms", "6000", stdout=out, stderr=out,
            env=dict(os.environ, TMPDIR=str(spark_tmp)))
    server = f"127.0.0.1:{GRPC_PORTS['controller'] + offset}"
    channel = grpcsecure.channel(server, ClientCredentials(
        ca=(certs / "ca.pem").read_bytes(), certificate=(certs / "admin.pem").read_bytes(),
        key=(certs / "admin.key").read_bytes()))
    try:
        yield Run(proc, admin_pb2_grpc.AdminStub(channel), server, certs,
                  METRICS_PORTS["spark-executor"] + offset, spark_tmp, log, pinned, backlog,
                  load)
    finally:
        await channel.close()
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 60)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def test_run_spark_starts_an_executor_beside_the_workers_and_a_spark_flow_mirrors_through_it(
        run: Run, primary: LocalBroker, backup: LocalBroker) -> None:
    source, _, topic = run.pinned
    # Until the executor is up (its Spark session takes a while) the workers copy the flow.
    await run.wait_owned(topic, [0, 1], EXECUTOR, "the flow did not run on the executor",
                         timeout=180)
    assert sorted(_children(run.proc.pid).values()) == ["checkpointer", "configsync", "controller",
                                               "heartbeat", "replicator", "spark-executor"]
    await produce(primary.bootstrap, topic, [Record(f"a{i}".encode(), key=f"k{i}".encode(),
                                                   partition=i % 2) for i in range(40)])
    mirrored = await consume_all(backup.bootstrap, f"{source}.{topic}", expected=40,
                                 timeout=120)
    for p in (0, 1):
        assert [r.value for r in mirrored[p]] == [f"a{i}".encode() for i in range(p, 40, 2)]

    async def copied_by_spark() -> bool:  # the executor's own count of what it copied
        now = await run.partitions(topic)
        return all(now[p].worker_id == EXECUTOR and now[p].records_replicated == 20
                   for p in (0, 1))
    await wait_for(copied_by_spark, 30, "the executor does not report the copies",
                   interval=0.5)
    # Every other flow stays with the workers: nothing makes it heavy yet.
    for _, _, other in (run.backlog, run.load):
        await run.wait_owned(other, [0], WORKER, f"{other} should run on the worker")


def _descendants(pid: int) -> list[int]:
    """`pid` and every process below it (the executor, its JVM, Spark's Python workers)."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        for task in glob.glob(f"/proc/{current}/task/*/children"):
            with contextlib.suppress(OSError):
                todo.extend(int(c) for c in Path(task).read_text().split())
    return out


def _cmdlines(pids: Sequence[int]) -> list[list[bytes]]:
    out = []
    for pid in pids:
        with contextlib.suppress(OSError):
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"))
    return out


def _listening(pids: Sequence[int]) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket these processes listen on, read from /proc."""
    inodes = set()
    for pid in pids:
        for fd in glob.glob(f"/proc/{pid}/fd/*"):
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    out = set()
    for table, size in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            raw, port = fields[1].split(":")
            packed = b"".join(bytes.fromhex(raw[i:i + 8])[::-1] for i in range(0, len(raw), 8))
            address = ipaddress.ip_address(packed[:size])
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
                address = address.ipv4_mapped
            out.add((str(address), int(port, 16)))
    return out


async def test_spark_listens_on_the_bind_address_only_with_no_ui_and_authenticates(
        run: Run) -> None:
    """Issue 19: with `--bind 127.0.0.1` (the default) and the deployment's gRPC under
    mutual TLS, the executor, its driver JVM and Spark's Python workers listen on loopback
    only -- Spark's driver RPC and block manager included -- nothing answers as Spark's
    web UI (port 4040 and up, on any address), and the JVM runs with Spark's own
    authentication and encryption, its secret made by Spark and on no command line."""
    await run.wait_owned(run.pinned[2], [0, 1], EXECUTOR, "the flow is not on the executor")
    executor = next(pid for pid, name in _children(run.proc.pid).items()
                    if name == "spark-executor")
    pids = _descendants(executor)
    listening = _listening(pids)
    # Its own gRPC and /metrics, Spark's driver RPC and block manager at least.
    assert len(listening) >= 4, listening
    assert {address for address, _ in listening} == {"127.0.0.1"}, listening
    assert not [port for _, port in listening if 4040 <= port <= 4056], listening
    with pytest.raises(OSError):  # and nothing else of this host answers as the UI
        socket.create_connection(("127.0.0.1", 4040), timeout=2).close()
    jvm = [args for args in _cmdlines(pids) if b"org.apache.spark.deploy.SparkSubmit" in args]
    assert len(jvm) == 1, "no driver JVM among the executor's processes"
    args = jvm[0]
    for setting in (b"spark.authenticate=true", b"spark.network.crypto.enabled=true",
                    b"spark.io.encryption.enabled=true", b"spark.ui.enabled=false",
                    b"spark.driver.bindAddress=127.0.0.1"):
        assert setting in args, (setting, args)
    assert not [a for a in args if b"secret" in a.lower()], args
    assert "authentication on, encryption on" in run.log.read_text(errors="replace")


async def test_a_record_the_target_refuses_stops_its_partition_only_named_exactly(
        run: Run, primary: LocalBroker, backup: LocalBroker) -> None:
    source, target, topic = run.pinned
    remote = f"{source}.{topic}"
    await run.wait_owned(topic, [0, 1], EXECUTOR, "the flow is not on the executor")
    # Partition 1 gets 10 records, one larger than the target takes, then 10 more;
    # partition 0 keeps getting records. (Earlier tests of the module may have written
    # to both partitions: offsets are taken from what the source answered.)
    written = await produce(primary.bootstrap, topic, [Record(f"b{i}".encode(), partition=1)
                                                       for i in range(10)])
    [refused] = await produce(primary.bootstrap, topic,
                              [Record(b"x" * (LIMIT * 2), partition=1)])
    later = await produce(primary.bootstrap, topic, [Record(f"c{i}".encode(), partition=p)
                                                     for i in range(10) for p in (0, 1)])
    before = {0: min(r.offset for r in later if r.partition == 0),
              1: written[0].offset}
    at = refused.offset

    async def stopped() -> bool:
        p = (await run.partitions(topic)).get(1)
        return p is not None and p.state == ERROR
    await wait_for(stopped, 120, f"partition 1 did not stop\n{run.tail()}", interval=0.5)
    p1 = (await run.partitions(topic))[1]
    assert p1.worker_id == EXECUTOR
    assert p1.error.startswith("target rejected the record: MSG_SIZE_TOO_LARGE"), p1.error
    assert p1.error.endswith(f"(flow {source}->{target}, topic {topic!r}, partition 1, "
                             f"offset {at} -> {remote!r})"), p1.error
    flow = next(f for f in (await run.status()).flows if f.flow == f"{source}->{target}")
    assert flow.state == flows_pb2.FLOW_STATE_ERROR and f"offset {at}" in flow.error

    # The stopped partition is behind the source, in records (the refused one and the 10
    # after it) and in time: the age of the refused record, the oldest not copied.
    async def behind() -> bool:
        p = (await run.partitions(topic))[1]
        return p.lag_records == 11 and p.lag_ms > 0
    await wait_for(behind, 30, f"no time lag for the stopped partition: "
                   f"{(await run.partitions(topic))[1]}", interval=0.5)

    # Partition 0 goes on: everything arrives, now and later.
    await produce(primary.bootstrap, topic, [Record(f"d{i}".encode(), partition=0)
                                             for i in range(10)])
    mirrored = await consume_all(backup.bootstrap, remote,
                                 expected=before[0] + 20 + before[1] + 10, timeout=120)
    assert [r.value for r in mirrored[0]][before[0]:] == \
        [f"c{i}".encode() for i in range(10)] + [f"d{i}".encode() for i in range(10)]
    # Partition 1 holds exactly the records before the refused one, nothing after it.
    assert [r.value for r in mirrored[1]][before[1]:] == [f"b{i}".encode() for i in range(10)]
    assert (await run.partitions(topic))[1].next_offset == at

    # Caught up, partition 0 is 0 behind in records and in time.
    async def caught_up() -> bool:
        p = (await run.partitions(topic))[0]
        return p.lag_records == 0 and p.lag_ms == 0
    await wait_for(caught_up, 30, "partition 0 does not show caught up", interval=0.5)


async def test_the_executor_reports_the_replicators_mm2_metrics(run: Run) -> None:
    source, target, topic = run.pinned
    tags = re.compile(r'partition="0",source="' + source + r'",target="' + target
                      + r'",topic="' + re.escape(f"{source}.{topic}") + '"')
    names = ("record_count_total", "byte_count_total", "record_rate", "byte_rate",
             "record_age_ms", "record_age_ms_min", "record_age_ms_max", "record_age_ms_avg",
             "replication_latency_ms_max", "record_lag", "record_lag_ms")
    values: dict[str, float] = {}

    async def reported() -> bool:  # metrics follow each micro-batch's commit
        values.clear()
        for line in (await _scrape(run.metrics_port)).splitlines():
            name = line.split("{", 1)[0]
            if name in names and tags.search(_no_scope(line)):
                values[name] = float(line.rsplit(" ", 1)[1])
        # Partition 0 got 20 + 10 + 10 records, all copied by the executor.
        # (and all of them: nothing left behind the source's end, in records or time).
        return set(values) == set(names) and values["record_count_total"] >= 40 \
            and values["record_lag"] == 0 and values["record_lag_ms"] == 0
    try:
        await wait_for(reported, 30, "the executor's /metrics lack MM2 names", interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {values}\n" + "\n".join(
            line for line in (await _scrape(run.metrics_port)).splitlines()
            if topic in line)) from None
    # Records are read after they were produced: ages are real, non-negative durations,
    # and latency (to the target's ack) is at least the age (at read).
    assert 0 <= values["record_age_ms_min"] <= values["record_age_ms_max"]
    assert values["replication_latency_ms_max"] >= values["record_age_ms_max"]


async def test_offload_follows_sustained_load_and_backlog_and_hands_back_when_caught_up(
        run: Run, primary: LocalBroker, backup: LocalBroker) -> None:
    """Backlog: records arrive in bursts until the worker reports more than 300 behind
    (that the worker falls behind at some heartbeat is what the bursts wait for); on Spark
    it catches up and, below 50, the partition goes back. Load: a steady trickle above
    200 B/s for 2 s moves the partition to Spark."""
    b_source, _, b_topic = run.backlog
    l_source, _, l_topic = run.load
    sent = {b_topic: 0, l_topic: 0}

    async def burst(topic: str, count: int, size: int) -> None:
        first = sent[topic]
        sent[topic] += count
        await produce(primary.bootstrap, topic, [
            Record(f"{i:08d}".encode().ljust(size, b"."), partition=0)
            for i in range(first, first + count)])

    async def offloaded(topic: str, count: int, size: int) -> bool:
        p = (await run.partitions(topic)).get(0)
        if p is not None and p.worker_id == EXECUTOR:
            return True
        await burst(topic, count, size)
        return False

    await wait_for(lambda: offloaded(l_topic, 5, 100), 120,
                   f"sustained load did not offload the partition\n{run.tail()}", interval=0.3)
    # One query copies everything the executor owns, of every flow.
    pinned, loaded = "->".join(run.pinned[:2]), "->".join(run.load[:2])

    async def one_query() -> bool:
        starts = [line for line in run.log.read_text(errors="replace").splitlines()
                  if "Spark query copies" in line]
        return bool(starts) and f"{pinned}: " in starts[-1] and f"{loaded}: " in starts[-1]
    await wait_for(one_query, 30, f"no query copies both flows\n{run.tail()}", interval=0.3)
    await wait_for(lambda: offloaded(b_topic, 3000, 10), 180,
                   f"a backlog did not offload the partition\n{run.tail()}", interval=0.2)
    await run.wait_owned(b_topic, [0], WORKER, "the caught-up partition did not come back",
                         timeout=120)
    await burst(b_topic, 100, 10)
    await burst(l_topic, 100, 100)
    for source, topic, size in ((b_source, b_topic, 10), (l_source, l_topic, 100)):
        mirrored = await consume_all(backup.bootstrap, f"{source}.{topic}",
                                     expected=sent[topic], timeout=120)
        values = [r.value for r in mirrored[0]]
        expected = [f"{i:08d}".encode().ljust(size, b".") for i in range(sent[topic])]
        assert list(dict.fromkeys(values)) == expected, f"{topic}: lost or reordered"


async def test_an_executor_cut_off_from_the_controller_stops_copying_and_loses_nothing(
        run: Run, primary: LocalBroker, backup: LocalBroker) -> None:
    """The controller freezes (SIGSTOP): the executor's heartbeats go unanswered, so after
    three quarters of its lease it fences itself and stops its query at once, without
    waiting for the micro-batch in flight (the controller may hand the partitions on as
    soon as the lease runs out). Thawed, the flow goes on from where it stopped."""
    source, _, topic = run.pinned
    await run.wait_owned(topic, [0], EXECUTOR, "partition 0 is not on the executor")
    controller = next(pid for pid, name in _children(run.proc.pid).items()
                      if name == "controller")
    seen = len(run.log.read_bytes())

    async def fenced() -> bool:
        return b"Spark query stopped without draining (fenced)" in run.log.read_bytes()[seen:]
    os.kill(controller, signal.SIGSTOP)
    try:
        await produce(primary.bootstrap, topic, [Record(f"f{i}".encode(), partition=0)
                                                 for i in range(10)])
        await wait_for(fenced, 60, f"the executor did not fence itself\n{run.tail()}",
                       interval=0.3)
    finally:
        os.kill(controller, signal.SIGCONT)
    await run.wait_owned(topic, [0], EXECUTOR, "the flow did not come back to the executor",
                         timeout=120)
    await produce(primary.bootstrap, topic, [Record(f"g{i}".encode(), partition=0)
                                             for i in range(10)])
    mirrored = await consume_all(backup.bootstrap, f"{source}.{topic}", expected=60 + 30,
                                 timeout=120)
    assert list(dict.fromkeys(r.value for r in mirrored[0]))[40:] == \
        [f"f{i}".encode() for i in range(10)] + [f"g{i}".encode() for i in range(10)]
    # Given back and assigned again, partition 1 tries its refused record once more, and
    # stops at it again (the query restarts without it): nothing after it is copied.

    async def stopped_again() -> bool:
        p = (await run.partitions(topic)).get(1)
        return p is not None and p.state == ERROR and p.next_offset == 30 \
            and "offset 30" in p.error
    await wait_for(stopped_again, 60, f"partition 1 did not stop again\n{run.tail()}",
                   interval=0.5)

    async def restarted_without_it() -> bool:
        text = run.log.read_bytes()[seen:]
        at = text.rfind(b"stopped: target rejected the record")
        return at >= 0 and b"Spark query copies" in text[at:]
    await wait_for(restarted_without_it, 60, f"the query did not restart\n{run.tail()}",
                   interval=0.3)


async def test_a_failing_spark_query_hands_its_partitions_back_and_status_says_why(
        run: Run, primary: LocalBroker, backup: LocalBroker) -> None:
    """The query's checkpoint directory disappears under it, again and again (as when a
    temp-file cleaner sweeps /tmp): Spark cannot record the next micro-batch (the flow's
    heartbeats topic brings one every second) and the query fails. The sweeping goes on
    until it does, because a query the executor restarts meanwhile (another flow's
    partition moving) starts with a fresh directory."""
    source, target, topic = run.pinned
    remote = f"{source}.{topic}"
    await run.wait_owned(topic, [0], EXECUTOR, "partition 0 is not on the executor")
    assert glob.glob(str(run.tmp / f"mirrorline-spark-{QUERY}-*")), os.listdir(run.tmp)
    await produce(primary.bootstrap, topic, [Record(f"e{i}".encode(), partition=0)
                                             for i in range(10)])

    async def given_back() -> bool:
        for path in glob.glob(str(run.tmp / f"mirrorline-spark-{QUERY}-*")):
            shutil.rmtree(path, ignore_errors=True)
        now = await run.partitions(topic)
        return 0 in now and now[0].worker_id == WORKER and now[0].state == RUNNING
    await wait_for(given_back, 60, f"the partitions did not go back to the worker\n"
                   f"{run.tail()}", interval=0.5)

    async def said() -> bool:
        return any(p.executor_id == EXECUTOR and f"Spark query {QUERY} (flows " in p.problem
                   and f"{source}->{target}" in p.problem
                   for p in (await run.status()).spark_problems)
    await wait_for(said, 30, "status does not say why the executor gave partitions back")
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mirrorline", "admin", "--server", run.server, "status",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env=dict(os.environ, MIRRORLINE_CA=str(run.certs / "ca.pem"),
                 MIRRORLINE_CERT=str(run.certs / "viewer.pem"),
                 MIRRORLINE_KEY=str(run.certs / "viewer.key")))
    out = (await asyncio.wait_for(cli.communicate(), 60))[0].decode()
    assert re.search(rf"^{EXECUTOR} gave its partitions back to the workers: Spark query "
                     rf"{QUERY} \(flows [^)]*{re.escape(source)}->{re.escape(target)}[^)]*\) "
                     rf"failed: ", out, re.M), out
    # Nothing lost: the worker goes on from the executor's recorded progress.
    mirrored = await consume_all(backup.bootstrap, remote, expected=70 + 30,
                                 timeout=120)
    assert list(dict.fromkeys(r.value for r in mirrored[0]))[20:] == [
        f"{tag}{i}".encode() for tag in "cdfge" for i in range(10)]
    # A clean stop of everything, the executor included.
    run.proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(run.proc.wait(), 60) == 0


async def test_a_clean_stop_leaves_no_folder_of_the_executor_behind(run: Run) -> None:
    """Every start used to leave its `mirrorline-spark-*` work folder in the temp folder:
    Spark's own stop outlasts the executor's stop budget, and the folder went last. Runs
    last: after the module's other tests the run is stopped already (by the test above,
    with a query running); on its own it waits for the executor's query, then stops."""
    if run.proc.returncode is None:
        await run.wait_owned(run.pinned[2], [0, 1], EXECUTOR,
                             "the flow did not run on the executor", timeout=180)
        assert glob.glob(str(run.tmp / "mirrorline-spark-*")), os.listdir(run.tmp)
        run.proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(run.proc.wait(), 60) == 0
    assert not glob.glob(str(run.tmp / "mirrorline-spark-*")), os.listdir(run.tmp)


async def _scrape(port: int) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
    await writer.drain()
    response = await reader.read()
    writer.close()
    return response.split(b"\r\n\r\n", 1)[1].decode()


def _no_scope(line: str) -> str:
    return re.sub(r'otel_scope_[a-z_]+="[^"]*",?', "", line)
