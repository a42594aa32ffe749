"""A flush waits for what was saved before it, not for a quiet moment, and nothing saved
ends the writer.

When a partition moves away, its owner flushes its progress and bookkeeping; the
partitions it keeps go on copying and so go on saving. A flush that waited until nothing
was left to write never saw that moment: every hand-over stalled for the full flush
timeout and ended in a false "not written" warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

import pytest
from aiokafka import AIOKafkaProducer
from helpers import create_topic, wait_for

from mirrorline.core.progress import progress_topic
from mirrorline.dev.brokers import LocalBroker
from mirrorline.kafka.bookkeeping import OffsetMapWriter
from mirrorline.kafka.offset_map_reader import OffsetMapFollower
from mirrorline.kafka.progress import PROGRESS_PARTITIONS, ProgressStore, read_progress

pytestmark = pytest.mark.integration


@contextlib.asynccontextmanager
async def busy(work: Callable[[int], None]) -> AsyncIterator[None]:
    """Call `work(n)` every millisecond until the block exits: partitions still copying."""
    async def run() -> None:
        n = 0
        while True:
            work(n)
            n += 1
            await asyncio.sleep(0.001)

    task = asyncio.create_task(run())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.fixture
async def store(backup: LocalBroker, unique: str, caplog: pytest.LogCaptureFixture
                ) -> AsyncIterator[ProgressStore]:
    """A started progress store of a fresh source alias on `backup`; warnings captured."""
    alias = f"src{unique[-6:]}"
    await create_topic(backup.bootstrap, progress_topic(alias), PROGRESS_PARTITIONS)
    producer = AIOKafkaProducer(bootstrap_servers=backup.bootstrap, linger_ms=1)
    await producer.start()
    progress = ProgressStore(source_alias=alias, producer=producer, replication_factor=1,
                             consumer_kwargs={"bootstrap_servers": backup.bootstrap})
    progress.start()
    caplog.set_level(logging.WARNING, logger="mirrorline.kafka.progress")
    try:
        yield progress
    finally:
        await progress.stop()
        await producer.stop()


async def test_progress_flush_returns_once_what_it_saw_is_durable_while_others_save(
        backup: LocalBroker, store: ProgressStore, caplog: pytest.LogCaptureFixture) -> None:
    async with busy(lambda n: store.save("kept", n % 4, n + 1)):
        await asyncio.sleep(0.2)
        store.save("moving", 0, 1234)
        await store.flush(timeout=8.0)
        assert "not written within" not in caplog.text
        durable = await read_progress({"bootstrap_servers": backup.bootstrap},
                                      store.source_alias)
        assert durable[("moving", 0)] == 1234


async def test_a_partition_let_go_before_its_first_copy_does_not_stop_progress(
        backup: LocalBroker, store: ProgressStore, caplog: pytest.LogCaptureFixture) -> None:
    """A partition moved away before anything of it was copied is released at offset 0.
    That records nothing (MM2's progress names the last offset copied), and the other
    partitions' progress keeps being written: the writer used to die on it, after which
    no progress of the flow was recorded and every hand-over waited out the flush."""
    store.save("idle", 0, 0)
    store.save("busy", 0, 10)
    await store.flush(timeout=8.0)
    store.save("busy", 0, 20)
    await store.flush(timeout=8.0)
    assert "not written within" not in caplog.text
    durable = await read_progress({"bootstrap_servers": backup.bootstrap}, store.source_alias)
    assert durable == {("busy", 0): 20}


async def test_offset_map_flush_returns_once_what_it_saw_is_acknowledged_while_runs_arrive(
        backup: LocalBroker, unique: str, caplog: pytest.LogCaptureFixture) -> None:
    topic = f"{unique}-map"
    await create_topic(backup.bootstrap, topic, 1)
    producer = AIOKafkaProducer(bootstrap_servers=backup.bootstrap, linger_ms=1)
    await producer.start()
    writer = OffsetMapWriter(producer, topic, interval_s=0.001)
    writer.start()
    caplog.set_level(logging.WARNING, logger="mirrorline.kafka.bookkeeping")
    try:
        async with busy(lambda n: writer.acknowledged("kept", n % 4, [n], n)):
            await asyncio.sleep(0.2)
            writer.acknowledged("moving", 0, [0, 1, 2], 500)
            await writer.flush(timeout=8.0)
            assert "not written within" not in caplog.text
            follower = OffsetMapFollower({"bootstrap_servers": backup.bootstrap}, topic)
            mapped = await follower.refresh()
            assert mapped.mapped_until("moving", 0) == 3
    finally:
        await writer.stop()
        await producer.stop()


async def test_a_partitions_first_offset_map_run_is_published_at_once_and_later_ones_wait(
        backup: LocalBroker, unique: str) -> None:
    """Until a partition has a mapped point, a crash leaves its next owner matching the
    remote partition from its start; the first run must not wait out the interval."""
    topic = f"{unique}-map"
    await create_topic(backup.bootstrap, topic, 1)
    producer = AIOKafkaProducer(bootstrap_servers=backup.bootstrap, linger_ms=1)
    await producer.start()
    writer = OffsetMapWriter(producer, topic, interval_s=600.0)
    writer.start()
    follower = OffsetMapFollower({"bootstrap_servers": backup.bootstrap}, topic)
    try:
        writer.acknowledged("new", 0, [0, 1, 2], 100)

        async def mapped() -> bool:
            return (await follower.refresh()).mapped_until("new", 0) == 3
        await wait_for(mapped, 10, "the first run was not published at once")
        writer.acknowledged("new", 0, [3, 4], 103)  # steady state: coalesced
        await asyncio.sleep(0.5)
        assert (await follower.refresh()).mapped_until("new", 0) == 3
        await writer.flush(timeout=8.0)
        assert (await follower.refresh()).mapped_until("new", 0) == 5
    finally:
        await writer.stop()
        await producer.stop()
