"""`python -m bench.resume`: what resuming from the target's tail costs after a crash.

A standalone replicator copies a seeded 4-partition topic; halfway through it is killed
with SIGKILL and a new one is started at once. Measured, with tail matching on (the
default) and off (`mirrorline.resume.tail.match = false`, durable progress alone):

* SIGKILL -> first new record on the target: from the kill until the target holds more
  records than it did when the killed process was gone (process start-up, reading
  progress, the offset map, the newest offset syncs and the tails included);
* duplicates: records on the target beyond the source's count once the copy finished.

Runs are interleaved (on, off, on, off, ...) and medians reported.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.common import HighWatermarks, create_topics, make_payloads, seed
from mirrorline.dev.brokers import LocalBroker
from mirrorline.dev.local import start_local, stop_local

PARTITIONS = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def until(check: Callable[[], Awaitable[bool]], timeout: float, interval: float,
                message: str) -> None:
    deadline = time.perf_counter() + timeout
    while not await check():
        if time.perf_counter() > deadline:
            raise TimeoutError(message)
        await asyncio.sleep(interval)


async def replicator(config: Path, workdir: Path, name: str) -> asyncio.subprocess.Process:
    log = await asyncio.to_thread(open, workdir / f"{name}.log", "wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mirrorline", "replicator", "--config", str(config),
        "--worker-id", name, "--grpc-port", str(free_port()), "--metrics-port", "-1",
        stdout=log, stderr=log)
    log.close()
    return proc


async def one_run(source: LocalBroker, target: LocalBroker, workdir: Path, records: int,
                  tail_match: bool) -> tuple[float, int]:
    topic = f"bench-resume-{secrets.token_hex(3)}"
    await create_topics(source.bootstrap, [topic], PARTITIONS)
    await seed(source.bootstrap, topic, PARTITIONS, make_payloads(records, 100))
    config = workdir / f"{topic}.properties"
    config.write_text("\n".join([
        "clusters = source, target",
        f"source.bootstrap.servers = {source.bootstrap}",
        f"target.bootstrap.servers = {target.bootstrap}",
        "source->target.enabled = true", f"source->target.topics = {topic}",
        "replication.policy.class = IdentityReplicationPolicy",
        "target.producer.batch.size = 65536",
        f"mirrorline.resume.tail.match = {'true' if tail_match else 'false'}", ""]))
    async with HighWatermarks(target.bootstrap, topic, PARTITIONS) as marks:
        first = await replicator(config, workdir, f"{topic}-first")
        async def halfway() -> bool:
            return await marks.total() >= records // 2
        await until(halfway, 120, 0.02, "the first replicator never got halfway")
        killed = time.perf_counter()
        first.send_signal(signal.SIGKILL)
        await first.wait()
        there = await marks.total()
        second = await replicator(config, workdir, f"{topic}-second")
        try:
            async def more() -> bool:
                return await marks.total() > there
            await until(more, 120, 0.01, "the second replicator copied nothing")
            took = time.perf_counter() - killed

            async def complete() -> bool:
                return await marks.total() >= records
            await until(complete, 120, 0.2, "the copy never completed")
            await asyncio.sleep(1.0)  # anything still arriving is a duplicate too
            duplicates = await marks.total() - records
        finally:
            second.send_signal(signal.SIGTERM)
            await second.wait()
    return took, duplicates


async def main(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="mirrorline-bench-resume-"))
    source = await start_local("kafka", "source", workdir)
    target = await start_local("kafka", "target", workdir)
    results: dict[bool, list[tuple[float, int]]] = {True: [], False: []}
    try:
        for _ in range(args.runs):
            for tail_match in (True, False):
                results[tail_match].append(
                    await one_run(source, target, workdir, args.records, tail_match))
    finally:
        await stop_local(source)
        await stop_local(target)
    for tail_match, runs in results.items():
        label = "tail matching on " if tail_match else "tail matching off"
        times = [t for t, _ in runs]
        dups = [d for _, d in runs]
        print(f"{label}: SIGKILL -> first new record {statistics.median(times):.2f} s "
              f"(runs {', '.join(f'{t:.2f}' for t in times)}); duplicates median "
              f"{statistics.median(dups):.0f} (runs {', '.join(map(str, dups))})", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.resume")
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--runs", type=int, default=3)
    os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    asyncio.run(main(parser.parse_args()))
