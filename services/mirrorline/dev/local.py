"""One local cluster of either broker, for the demo and the bench: the pick in one place.

`tansu` needs nothing but pip; `kafka` is Apache Kafka from `mirrorline dev kafka install`.
Both come back as a `LocalBroker` record (alias, bootstrap, every pid), so callers need not
care which one runs. The clusters start empty: a Kafka folder left by an earlier run is
removed first, as Tansu's memory storage starts empty anyway.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from mirrorline.dev import kafka
from mirrorline.dev.brokers import LocalBroker, start_broker, stop_broker_async

BROKERS = ("tansu", "kafka")


def describe(broker: str) -> str:
    return f"Apache Kafka {kafka.KAFKA_VERSION}" if broker == "kafka" else "Tansu"


async def start_local(broker: str, alias: str, directory: Path) -> LocalBroker:
    """A fresh single-node cluster `alias` of `broker` ("tansu" or "kafka") under `directory`."""
    if broker == "kafka":
        folder = directory / "kafka" / alias
        await asyncio.to_thread(shutil.rmtree, folder, ignore_errors=True)
        cluster = await kafka.start_kafka(alias, directory=folder)
        return cluster.record()
    if broker != "tansu":
        raise ValueError(f"unknown broker {broker!r}: expected one of {', '.join(BROKERS)}")
    return await start_broker(alias, log_dir=directory / "logs")


async def stop_local(cluster: LocalBroker) -> None:
    """Stop every process of `cluster` (SIGTERM, then SIGKILL)."""
    await asyncio.gather(*(stop_broker_async(pid) for pid in cluster.all_pids))
