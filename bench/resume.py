"""`python -m bench.resume`: what resuming from the target's tail costs after a crash.

A standalone replicator copies a seeded 4-partition topic; halfway through it is killed
with SIGKILL and a new one is started at once. Measured, with tail matching on (the
default) and off (`mirrorline.resume.tail.match = false`, durable progress alone):

* SIGKILL -> first new record on the target: from the kill until the target holds more
  records than it did when the killed process was gone (process start-up, reading
  progress, the offset map, the newest offset syncs and the tails included);
* duplicates: records on the target beyond the source's count once the copy finished.

Runs are interleaved (on, off, on, off, ...) and medians reported. With `--mm2`, each
round also runs Apache Kafka's MirrorMaker 2 (dedicated mode, `bench/mm2.py`'s settings,
its own default `offset.flush.interval.ms`) the same way: killed halfway, a new MM2
started at once.
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

from bench import mm2 as mm2_contender
from bench.common import BenchEnv, HighWatermarks, create_topics, make_payloads, seed
from mirrorline.dev import mm2
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


class Mm2Process:
    """MM2 started like a replicator: `send_signal` and `wait` as on a subprocess."""

    def __init__(self, process: mm2.MirrorMaker2) -> None:
        self.process = process

    def send_signal(self, sig: int) -> None:
        self.process.proc.send_signal(sig)

    async def wait(self) -> int:
        return await mm2.stop_mm2(self.process, timeout=30)


async def start_mm2(config: Path, workdir: Path, name: str) -> Mm2Process:
    process = await mm2.start_mm2(config, directory=workdir / name, clusters=["target"],
                                  jvm_opts=mm2_contender.JVM_OPTS, name=name)
    return Mm2Process(process)


async def one_run(source: LocalBroker, target: LocalBroker, workdir: Path, records: int,
                  tail_match: bool, with_mm2: bool = False) -> tuple[float, int]:
    topic = f"bench-resume-{secrets.token_hex(3)}"
    await create_topics(source.bootstrap, [topic], PARTITIONS)
    await seed(source.bootstrap, topic, PARTITIONS, make_payloads(records, 100))
    config = workdir / f"{topic}.properties"
    start: Callable[[Path, Path, str], Awaitable[asyncio.subprocess.Process | Mm2Process]]
    start = replicator
    # The target topic exists before either starts (as the identity policy names it), so the
    # watcher never asks Kafka about a topic that is not there yet.
    await create_topics(target.bootstrap, [topic], PARTITIONS)
    if with_mm2:
        env = BenchEnv(source_alias="source", target_alias="target",
                       source_bootstrap=source.bootstrap, target_bootstrap=target.bootstrap,
                       source_topic=topic, target_topic=topic, partitions=PARTITIONS,
                       records=records, record_size=100, workdir=workdir)
        config.write_text(mm2_contender.config(env))
        start = start_mm2
        return await _kill_and_resume(config, workdir, topic, target, records, start)
    config.write_text("\n".join([
        "clusters = source, target",
        f"source.bootstrap.servers = {source.bootstrap}",
        f"target.bootstrap.servers = {target.bootstrap}",
        "source->target.enabled = true", f"source->target.topics = {topic}",
        "replication.policy.class = IdentityReplicationPolicy",
        "target.producer.batch.size = 65536",
        f"mirrorline.resume.tail.match = {'true' if tail_match else 'false'}", ""]))
    return await _kill_and_resume(config, workdir, topic, target, records, start)


async def _kill_and_resume(
        config: Path, workdir: Path, topic: str, target: LocalBroker, records: int,
        start: Callable[[Path, Path, str], Awaitable[asyncio.subprocess.Process | Mm2Process]],
) -> tuple[float, int]:
    async with HighWatermarks(target.bootstrap, topic, PARTITIONS) as marks:
        async def led() -> bool:  # every new partition has a leader
            try:
                await marks.total()
            except Exception:
                return False
            return True
        await until(led, 30, 0.2, f"{topic} on the target has no leaders")
        first = await start(config, workdir, f"{topic}-first")
        async def halfway() -> bool:
            return await marks.total() >= records // 2
        await until(halfway, 120, 0.02, "the first replicator never got halfway")
        killed = time.perf_counter()
        first.send_signal(signal.SIGKILL)
        await first.wait()
        there = await marks.total()
        second = await start(config, workdir, f"{topic}-second")
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
    results: dict[str, list[tuple[float, int]]] = {"on": [], "off": []}
    if args.mm2:
        results["mm2"] = []
    try:
        for _ in range(args.runs):
            for kind in results:
                results[kind].append(await one_run(source, target, workdir, args.records,
                                                   kind == "on", with_mm2=kind == "mm2"))
    finally:
        await stop_local(source)
        await stop_local(target)
    for kind, runs in results.items():
        label = {"on": "tail matching on ", "off": "tail matching off",
                 "mm2": "MirrorMaker 2    "}[kind]
        times = [t for t, _ in runs]
        dups = [d for _, d in runs]
        print(f"{label}: SIGKILL -> first new record {statistics.median(times):.2f} s "
              f"(runs {', '.join(f'{t:.2f}' for t in times)}); duplicates median "
              f"{statistics.median(dups):.0f} (runs {', '.join(map(str, dups))})", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.resume")
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mm2", action="store_true",
                        help="also run MirrorMaker 2 the same way (Apache Kafka brokers)")
    os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    asyncio.run(main(parser.parse_args()))
