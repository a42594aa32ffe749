"""`python -m bench.control_plane`: how the controller-run deployment behaves, in figures.

Three measurements between two local clusters, with a controller and replicator workers
as separate processes (as `mirrorline run` starts them):

* flow creation: time from calling `CreateFlow` (on a controller past its start-up grace)
  to the first record on the target;
* reassignment: time from killing a worker (SIGKILL) until every partition it owned is
  reported running on another worker (the lease is 6 s, MM2-style rebalances not involved);
* throughput with 1, 2 and 3 workers copying one 12-partition topic (on 2 cores the
  curve flattens: the workers share the cores with the brokers).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc

from bench.common import create_topics, make_payloads, seed
from mirrorline.dev.brokers import LocalBroker
from mirrorline.dev.local import start_local, stop_local
from mirrorline.kafka.watermarks import high_watermarks, totals
from mirrorline.v1 import admin_pb2, admin_pb2_grpc, flows_pb2

PARTITIONS = 12
LEASE_MS = 6000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Processes:
    def __init__(self, workdir: Path, config: Path) -> None:
        self.workdir, self.config = workdir, config
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.admin_port = free_port()

    async def spawn(self, name: str, *args: str) -> None:
        log = await asyncio.to_thread(open, self.workdir / f"{name}.log", "wb")
        self.procs[name] = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mirrorline", *args, "--config", str(self.config),
            "--metrics-port", "-1", stdout=log, stderr=log)
        log.close()

    async def controller(self) -> None:
        await self.spawn("controller", "controller", "--controller-id", "c1", "--grpc-port",
                         str(self.admin_port), "--lease-ms", str(LEASE_MS))

    async def worker(self, name: str) -> None:
        await self.spawn(name, "replicator", "--worker", "--worker-id", name, "--grpc-port",
                         str(free_port()))

    async def stop(self) -> None:
        for proc in self.procs.values():
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        await asyncio.gather(*(p.wait() for p in self.procs.values()))


@asynccontextmanager
async def deployment(source: LocalBroker, target: LocalBroker, workdir: Path, workers: int
                     ) -> AsyncIterator[tuple[Processes, admin_pb2_grpc.AdminAsyncStub]]:
    config = workdir / f"mm2-{secrets.token_hex(3)}.properties"
    config.write_text("\n".join([
        "clusters = source, target",
        f"source.bootstrap.servers = {source.bootstrap}",
        f"target.bootstrap.servers = {target.bootstrap}",
        f"mirrorline.deployment = bench{secrets.token_hex(3)}",
        "replication.policy.class = IdentityReplicationPolicy", ""]))
    procs = Processes(workdir, config)
    await procs.controller()
    for i in range(workers):
        await procs.worker(f"w{i}")
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{procs.admin_port}")
    admin = admin_pb2_grpc.AdminStub(channel)
    try:
        await until(lambda: workers_alive(admin, workers), 60, "workers never registered")
        yield procs, admin
    finally:
        await channel.close()
        await procs.stop()


async def workers_alive(admin: admin_pb2_grpc.AdminAsyncStub, count: int) -> bool:
    try:
        reply = await admin.ListWorkers(admin_pb2.ListWorkersRequest(), timeout=2)
    except grpc.aio.AioRpcError:
        return False
    return sum(w.alive for w in reply.workers) >= count


async def until(check: object, timeout: float, message: str) -> float:
    started = time.perf_counter()
    while not await check():  # type: ignore[operator]
        if time.perf_counter() - started > timeout:
            raise TimeoutError(message)
        await asyncio.sleep(0.05)
    return time.perf_counter() - started


async def target_count(target: LocalBroker, topic: str) -> int:
    return totals(await high_watermarks({"bootstrap_servers": target.bootstrap}, [topic])
                  ).get(topic, 0)


async def create_flow(admin: admin_pb2_grpc.AdminAsyncStub, topic: str) -> None:
    await admin.CreateFlow(admin_pb2.CreateFlowRequest(spec=flows_pb2.FlowSpec(
        source="source", target="target",
        properties={"topics": topic, "refresh.topics.interval.seconds": "2"})), timeout=30)


async def measure_creation(source: LocalBroker, target: LocalBroker, workdir: Path) -> float:
    topic = f"bench-create-{secrets.token_hex(3)}"
    await create_topics(source.bootstrap, [topic], PARTITIONS)
    await seed(source.bootstrap, topic, PARTITIONS, make_payloads(1200, 100))
    async with deployment(source, target, workdir, 2) as (_, admin):
        # Steady state: a newly elected controller first gives workers a lease period to
        # find it before it assigns anything; an operator's later flows do not wait for that.
        await asyncio.sleep(LEASE_MS / 1000)
        started = time.perf_counter()
        await create_flow(admin, topic)

        async def arrived() -> bool:
            return await target_count(target, topic) > 0
        await until(arrived, 120, "no record arrived")
        return time.perf_counter() - started


async def measure_reassignment(source: LocalBroker, target: LocalBroker, workdir: Path
                               ) -> tuple[float, int]:
    topic = f"bench-reassign-{secrets.token_hex(3)}"
    await create_topics(source.bootstrap, [topic], PARTITIONS)
    await seed(source.bootstrap, topic, PARTITIONS, make_payloads(1200, 100))
    async with deployment(source, target, workdir, 3) as (procs, admin):
        await create_flow(admin, topic)

        async def owners() -> dict[tuple[str, int], str]:
            report = await admin.GetStatus(admin_pb2.GetStatusRequest(), timeout=5)
            return {(p.source_topic, p.partition): p.worker_id for p in report.partitions
                    if p.state == flows_pb2.PARTITION_STATE_RUNNING}

        async def all_running() -> bool:
            return len(await owners()) == PARTITIONS
        await until(all_running, 120, "partitions never all ran")
        victim = "w0"
        moved = [k for k, w in (await owners()).items() if w == victim]
        procs.procs[victim].send_signal(signal.SIGKILL)
        killed = time.perf_counter()

        async def reassigned() -> bool:
            now = await owners()
            return len(now) == PARTITIONS and victim not in now.values()
        await until(reassigned, 120, "partitions were not reassigned")
        return time.perf_counter() - killed, len(moved)


async def measure_throughput(source: LocalBroker, target: LocalBroker, workdir: Path,
                             workers: int, records: int) -> float:
    topic = f"bench-workers{workers}-{secrets.token_hex(3)}"
    await create_topics(source.bootstrap, [topic], PARTITIONS)
    await create_topics(target.bootstrap, [topic], PARTITIONS)
    await seed(source.bootstrap, topic, PARTITIONS, make_payloads(records, 100))
    async with deployment(source, target, workdir, workers) as (_, admin):
        await create_flow(admin, topic)

        async def started() -> bool:
            return await target_count(target, topic) > 0
        await until(started, 120, "nothing arrived")
        first = time.perf_counter()

        async def done() -> bool:
            return await target_count(target, topic) >= records
        await until(done, 600, "the copy did not finish")
        return records / (time.perf_counter() - first)


async def main(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="mirrorline-bench-cp-"))
    source = await start_local("kafka", "source", workdir)
    target = await start_local("kafka", "target", workdir)
    try:
        creation = await measure_creation(source, target, workdir)
        print(f"flows create -> first replicated record: {creation:.2f} s", flush=True)
        took, moved = await measure_reassignment(source, target, workdir)
        print(f"worker killed -> its {moved} partitions running elsewhere: {took:.2f} s "
              f"(lease {LEASE_MS / 1000:.0f} s)", flush=True)
        for workers in (1, 2, 3):
            rate = await measure_throughput(source, target, workdir, workers, args.records)
            print(f"{workers} worker(s), {PARTITIONS} partitions, {args.records:,} x 100 B: "
                  f"{rate:,.0f} records/s", flush=True)
    finally:
        await stop_local(source)
        await stop_local(target)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.control_plane")
    parser.add_argument("--records", type=int, default=300_000)
    os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    asyncio.run(main(parser.parse_args()))
