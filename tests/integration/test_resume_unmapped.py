"""Resuming a partition that has copies on the target but no exactly mapped point yet.

That is what a replicator leaves when it crashes soon after a partition's first copies
landed: before its first offset sync and offset-map run were written. The
crash is reproduced deterministically by writing those first copies into the remote topic
ourselves -- exactly as the replicator would (same key, value, headers, timestamp, in
order) -- with no progress, no syncs and no offset-map entry for the partition. Then a
replicator starts as the next owner.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import PAST_MS, Consumed, Record, consume_all, create_topic, produce, wait_for
from procs import mm2_config, replicator

from mirrorline.core.progress import encode_offset, progress_topic, source_offset_key
from mirrorline.dev.brokers import LocalBroker

pytestmark = pytest.mark.integration

RECORDS = 12
FOREIGN = b"written by someone else"


async def source_records(primary: LocalBroker, topic: str) -> list[Consumed]:
    await create_topic(primary.bootstrap, topic, 1)
    await produce(primary.bootstrap, topic, [
        Record(f"v{n}".encode(), key=f"k{n}".encode(), headers=[("n", f"{n}".encode())],
               timestamp_ms=PAST_MS + n, partition=0) for n in range(RECORDS)])
    return (await consume_all(primary.bootstrap, topic))[0]


async def mirrored(primary: LocalBroker, backup: LocalBroker, topic: str, tmp_path: Path,
                   last: bytes | None) -> tuple[list[Consumed], str]:
    """Run a replicator until the remote partition ends with `last`: its records and log."""
    config = mm2_config({"primary": primary, "backup": backup},
                        {"primary->backup": {"topics": topic}})
    remote = f"primary.{topic}"
    async with replicator(config, tmp_path) as proc:
        async def caught_up() -> bool:
            records = (await consume_all(backup.bootstrap, remote))[0]
            return bool(records) and records[-1].value == last
        await wait_for(caught_up, 30, "the target never caught up with the source",
                       interval=0.3)
        log = proc.log_path.read_text()
    return (await consume_all(backup.bootstrap, remote))[0], log


def content(records: list[Consumed]) -> list[tuple[object, ...]]:
    return [(r.key, r.value, tuple(r.headers), r.timestamp) for r in records]


async def test_first_copies_without_a_mapped_point_are_not_copied_again(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    topic = f"{unique}-unmapped"
    source = await source_records(primary, topic)
    await create_topic(backup.bootstrap, f"primary.{topic}", 1)
    await produce(backup.bootstrap, f"primary.{topic}", [Record.of(r) for r in source[:4]])
    target, log = await mirrored(primary, backup, topic, tmp_path, source[-1].value)
    assert content(target) == content(source), (
        f"{len(target) - len(source)} extra records on the target: the first copies "
        "were copied again")
    assert f"{topic}-0: resuming at source offset 4" in log


async def test_copies_after_durable_progress_without_a_mapped_point_are_not_repeated(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """Durable progress: 0..4 copied (MM2 stores offset 4, the last one); the crashed owner's
    first copies, 5..8, are in the remote partition with nothing mapping them."""
    topic = f"{unique}-unmapped-progress"
    source = await source_records(primary, topic)
    await produce(backup.bootstrap, progress_topic("primary"), [
        Record(encode_offset(4), key=source_offset_key("primary", topic, 0))])
    await create_topic(backup.bootstrap, f"primary.{topic}", 1)
    await produce(backup.bootstrap, f"primary.{topic}", [Record.of(r) for r in source[5:9]])
    target, log = await mirrored(primary, backup, topic, tmp_path, source[-1].value)
    assert content(target) == content(source[5:]), "records after progress copied twice"
    assert f"{topic}-0: resuming at source offset 9" in log


async def test_copies_from_the_start_with_durable_progress_but_no_mapped_point_are_not_repeated(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """The owner copied 0..8 from the source's start and wrote durable progress (offset 4)
    before its first offset sync and offset-map run, then crashed: the remote partition
    starts with the copy of source offset 0, not of the progress one. A worker killed
    mid-burst one second after it took a new flow left this (the hand-over test of
    test_exactly_once.py, now and then), and the next owner copied 5..8 again."""
    topic = f"{unique}-unmapped-from-start"
    source = await source_records(primary, topic)
    await produce(backup.bootstrap, progress_topic("primary"), [
        Record(encode_offset(4), key=source_offset_key("primary", topic, 0))])
    await create_topic(backup.bootstrap, f"primary.{topic}", 1)
    await produce(backup.bootstrap, f"primary.{topic}", [Record.of(r) for r in source[:9]])
    target, log = await mirrored(primary, backup, topic, tmp_path, source[-1].value)
    assert content(target) == content(source), "records after progress copied twice"
    assert f"{topic}-0: resuming at source offset 9" in log


async def test_a_foreign_record_in_the_remote_topic_falls_back_to_copy_everything(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    topic = f"{unique}-preexisting"
    source = await source_records(primary, topic)
    await create_topic(backup.bootstrap, f"primary.{topic}", 1)
    await produce(backup.bootstrap, f"primary.{topic}",
                  [Record(FOREIGN, key=b"x", partition=0), *(Record.of(r) for r in source[:3])])
    target, log = await mirrored(primary, backup, topic, tmp_path, source[-1].value)
    # Nothing skipped: every source record after the foreign one, the first three again.
    assert target[0].value == FOREIGN
    assert content(target[4:]) == content(source)
    assert f"{topic}-0: tail on the target not matched: there is no exactly mapped " \
           "point" in log and "WARNING" in log
