"""Compacted source topics on Apache Kafka: offset gaps, and exact translation across them.

Kafka's log cleaner removes superseded records of a `cleanup.policy=compact` topic, leaving
gaps in its offsets. The target has no gaps (the mirror writes the survivors one after the
other), so target offsets drift from source offsets; consumer-group checkpoints must still
translate exactly: a group committed at source offset `g` resumes on the target at the first
mirrored record at or after `g` -- the number of surviving source records below `g`.
The topic rolls a segment every 100 ms and the cleaner cleans at the smallest dirty ratio,
so the cleaner really runs here (the test waits until it has, and checks the gaps exist).
"""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import pytest
from helpers import Record, commit_offsets, consume_all, produce, wait_for
from kafka_helpers import create_replicated_topic
from procs import checkpointer, mm2_config, replicator

from mirrorline.client import translate_offsets
from mirrorline.dev.brokers import LocalBroker

#: Generous: these tests start their own services (and clusters) on a shared 2-core machine.
pytestmark = [pytest.mark.integration, pytest.mark.kafka_only, pytest.mark.timeout(600)]

COMPACTED = {
    "cleanup.policy": "compact",
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "100",
}
KEYS = 5
ROUNDS = 20
#: A ceiling for a service or the cleaner on a loaded 2-core machine; nothing is asserted
#: about the time taken.
CEILING_S = 120.0


async def survivors(bootstrap: str, topic: str) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for r in (await consume_all(bootstrap, topic))[0]]


async def compacted_log(bootstrap: str, topic: str, produced: int
                        ) -> list[tuple[int, bytes | None]]:
    """The source partition once the cleaner has removed records and then stopped changing
    it (nothing more is written, so after one pass there is nothing dirty left)."""
    seen: list[tuple[int, bytes | None]] = []

    async def settled() -> bool:
        nonlocal seen
        before = seen
        seen = await survivors(bootstrap, topic)
        return len(seen) < produced and seen == before
    await wait_for(settled, CEILING_S, f"the cleaner never compacted {topic}", interval=3.0)
    return seen


async def test_checkpoints_translate_exactly_across_compaction_gaps(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    topic = f"{unique}.compacted"
    await create_replicated_topic(primary.bootstrap, topic, 1, configs=COMPACTED)
    produced = 0
    for round_ in range(ROUNDS):  # one segment per round: each is older than segment.ms
        # Keys every round overwrites, then one key of the round's own: the cleaner keeps
        # the latter, so survivors are spread out with gaps between them.
        await produce(primary.bootstrap, topic, [
            *(Record(value=f"r{round_}-k{k}".encode(), key=f"k{k}".encode(), partition=0)
              for k in range(KEYS)),
            Record(value=f"r{round_}-own".encode(), key=f"own{round_}".encode(), partition=0)])
        produced += KEYS + 1
        await asyncio.sleep(0.15)
    log = await compacted_log(primary.bootstrap, topic, produced)
    offsets = [offset for offset, _ in log]
    end = offsets[-1] + 1
    gaps = [o for o in range(end) if o not in set(offsets)]
    assert gaps and gaps[0] == 0, f"compaction left no gap at the start: {offsets}"
    inner = [o for o in gaps if o > offsets[0]]
    assert inner, f"compaction left no gap between survivors: {offsets}"

    # Groups committed at: the log's start (compacted away), a gap between survivors, the
    # first record after that gap, a survivor in the middle, and the log end.
    positions = {"start": 0, "gap": inner[0], "after-gap": min(o for o in offsets if o > inner[0]),
                 "middle": offsets[len(offsets) // 2], "end": end}
    groups = {name: f"{unique}-{name}" for name in positions}
    for name, offset in positions.items():
        await commit_offsets(primary.bootstrap, groups[name], {(topic, 0): offset})

    a, b = f"p{secrets.token_hex(3)}", f"q{secrets.token_hex(3)}"
    config = mm2_config({a: primary, b: backup}, {f"{a}->{b}": {
        "topics": topic, "emit.checkpoints.interval.seconds": "1",
        "refresh.groups.interval.seconds": "1", "sync.group.offsets.enabled": "false"}})
    remote = (f"{a}.{topic}", 0)
    async with replicator(config, tmp_path, serving=False) as rep, \
            checkpointer(config, tmp_path, serving=False) as chk:
        await rep.wait_serving(CEILING_S)
        await chk.wait_serving(CEILING_S)
        mirrored = (await consume_all(backup.bootstrap, remote[0], expected=len(log),
                                      timeout=CEILING_S))[0]
        # The target holds the survivors, in order, without gaps.
        assert [r.value for r in mirrored] == [value for _, value in log]
        assert [r.offset for r in mirrored] == list(range(len(log)))

        target = {"bootstrap.servers": backup.bootstrap}
        translated: dict[str, int] = {}
        # Each group's exact position on the target: the survivors before its offset.
        expected = {name: sum(1 for o in offsets if o < g) for name, g in positions.items()}

        # A checkpoint made while the offset map still trailed the copy (the map reaches
        # the checkpointer a moment after the records reach the target) may translate a
        # group short of its place -- never past it: that would skip records. Once the
        # map has caught up, every group's checkpoint is exact.
        async def all_exact() -> bool:
            for name, group in groups.items():
                got = await translate_offsets(target, a, group)
                if remote in got:
                    translated[name] = got[remote][0]
                    assert translated[name] <= expected[name], \
                        (name, translated, expected, positions, offsets)
            return translated == expected
        try:
            await wait_for(all_exact, CEILING_S, "checkpoints never translated exactly",
                           interval=1.0)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {translated} != {expected} {(positions, offsets)}") \
                from None
