"""`python -m bench.soak`: a deployment under a steady trickle for a while, then its log read.

Two fresh local clusters (Apache Kafka by default, `--broker tansu` for the pip-only path),
the README's minimal configuration with a consumer group on the source (so the checkpointer
has something to translate) and `mirrorline run` on free ports. A record a second (`--rate`)
goes to `soak-orders` for `--minutes` (default 30); a consumer group reads it on the
source. At the end `run` gets SIGTERM, and the script prints, per service (the third field
of every log line: `run`, `controller`, `replicator`, `checkpointer`, `heartbeat`,
`configsync`), the count of ERROR and WARNING lines, then each distinct WARNING and ERROR
message (digits folded to `N`, with its count), and the number of tracebacks. It exits 1
when an ERROR or a traceback was logged or the target did not receive every record, so a
healthy run is also a pass/fail check. Nothing is left behind unless `--keep` is given
(then the work directory with `run.log` is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import re
import secrets
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from mirrorline.dev.brokers import LocalBroker
from mirrorline.dev.local import BROKERS, describe, start_local, stop_local
from mirrorline.dev.portcheck import is_free
from mirrorline.kafka.causes import quiet_aiokafka
from mirrorline.kafka.metadata import partitions_by_topic
from mirrorline.ports import run_ports

TOPIC = "soak-orders"
PARTITIONS = 4
GROUP = "soak-readers"
#: `asctime levelname service logger: message`, as `mirrorline.runtime.configure_logging`.
_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (?P<level>[A-Z]+)\s+(?P<service>\S+) "
                   r"(?P<logger>\S+): (?P<message>.*)$")


def free_offset(workers: int) -> int:
    """A `--port-offset` at which every port of `run` is free."""
    for offset in range(31000, 60000, 500):
        if all(is_free(port) for port in run_ports(workers, offset).values()):
            return offset
    raise SystemExit("soak: no free port range for mirrorline run")


def config_text(primary: LocalBroker, backup: LocalBroker, deployment: str) -> str:
    return (f"clusters = primary, backup\n"
            f"primary.bootstrap.servers = {primary.bootstrap}\n"
            f"backup.bootstrap.servers = {backup.bootstrap}\n"
            f"primary->backup.enabled = true\n"
            f"primary->backup.topics = {TOPIC}\n"
            f"mirrorline.deployment = {deployment}\n")


async def trickle(bootstrap: str, rate: float, until: float) -> int:
    """Produce `rate` records a second to `TOPIC` until `until` (monotonic); the count."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    sent = 0
    try:
        while time.monotonic() < until:
            await producer.send_and_wait(TOPIC, f"record {sent}".encode(),
                                         key=str(sent).encode())
            sent += 1
            await asyncio.sleep(1 / rate)
    finally:
        await producer.stop()
    return sent


async def read_along(bootstrap: str, until: float) -> None:
    """A consumer group on the source that commits as it reads (the checkpointer's input)."""
    consumer = AIOKafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id=GROUP,
                                auto_offset_reset="earliest", enable_auto_commit=True,
                                auto_commit_interval_ms=1000)
    await consumer.start()
    try:
        while time.monotonic() < until:
            await consumer.getmany(timeout_ms=1000)
    finally:
        await consumer.stop()


async def target_count(bootstrap: str, topic: str) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        parts: list[int] = (await partitions_by_topic(consumer, [topic])).get(topic) or []
        tps = [TopicPartition(topic, p) for p in parts]
        if not tps:
            return 0
        ends = await consumer.end_offsets(tps)
        starts = await consumer.beginning_offsets(tps)
        return sum(ends[tp] - starts[tp] for tp in tps)
    finally:
        await consumer.stop()


def summarise(log_text: str) -> tuple[dict[str, collections.Counter[str]],
                                       dict[str, collections.Counter[str]], int]:
    """Per service: level -> count, and (level, message) -> count; plus the tracebacks."""
    levels: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    messages: dict[str, collections.Counter[str]] = collections.defaultdict(
        collections.Counter)
    tracebacks = 0
    for line in log_text.splitlines():
        if line.startswith("Traceback"):
            tracebacks += 1
        match = _LINE.match(line)
        if match is None:
            continue
        service, level = match["service"], match["level"]
        levels[service][level] += 1
        if level in ("WARNING", "ERROR", "CRITICAL"):
            folded = re.sub(r"\d+", "N", f"{match['logger']}: {match['message']}")
            messages[service][f"{level} {folded[:220]}"] += 1
    return levels, messages, tracebacks


async def soak(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="mirrorline-soak-"))
    print(f"soak: {args.minutes:g} min at {args.rate:g} records/s on {describe(args.broker)}; "
          f"work directory {work}", flush=True)
    clusters: list[LocalBroker] = []
    run: asyncio.subprocess.Process | None = None
    try:
        clusters = list(await asyncio.gather(start_local(args.broker, "primary", work),
                                             start_local(args.broker, "backup", work)))
        primary, backup = clusters
        admin = AIOKafkaAdminClient(bootstrap_servers=primary.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
        finally:
            await admin.close()
        config = work / "mm2.properties"
        config.write_text(config_text(primary, backup, f"soak{secrets.token_hex(3)}"))
        offset = free_offset(args.workers)
        log_path = work / "run.log"
        with log_path.open("wb") as log:
            run = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "mirrorline", "run", "--config", str(config),
                "--workers", str(args.workers), "--port-offset", str(offset),
                stdout=log, stderr=log)
            until = time.monotonic() + args.minutes * 60
            sent, _ = await asyncio.gather(trickle(primary.bootstrap, args.rate, until),
                                           read_along(primary.bootstrap, until))
            # Let the last records through before stopping (bounded, not timed).
            mirrored = 0
            for _ in range(60):
                mirrored = await target_count(backup.bootstrap, f"primary.{TOPIC}")
                if mirrored >= sent:
                    break
                await asyncio.sleep(1)
            run.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(run.wait(), 60)
        text = log_path.read_text(errors="replace")
    finally:
        if run is not None and run.returncode is None:
            run.kill()
            await run.wait()
        await asyncio.gather(*(stop_local(c) for c in clusters), return_exceptions=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    levels, messages, tracebacks = summarise(text)
    print(f"\nrecords produced {sent}, on the target {mirrored}; `run` exited {code}")
    print(f"\n{'service':<14} {'ERROR':>6} {'WARNING':>8} {'INFO':>7}")
    for service in sorted(levels):
        counts = levels[service]
        print(f"{service:<14} {counts['ERROR'] + counts['CRITICAL']:>6} "
              f"{counts['WARNING']:>8} {counts['INFO']:>7}")
    for service in sorted(messages):
        print(f"\n{service}:")
        for message, count in messages[service].most_common():
            print(f"  {count:>5} x {message}")
    print(f"\ntracebacks: {tracebacks}")
    if args.keep:
        print(f"log: {work / 'run.log'}")
    errors = sum(c["ERROR"] + c["CRITICAL"] for c in levels.values())
    return 1 if errors or tracebacks or mirrored < sent or code != 0 else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=1.0, help="records a second")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--broker", choices=BROKERS, default="kafka")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    quiet_aiokafka()  # this script's own clients' retries are not the deployment's log
    return asyncio.run(soak(args))


if __name__ == "__main__":
    sys.exit(main())
