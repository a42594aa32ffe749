"""Where partitions start copying: durable progress, checked against the target's tail.

This is the one place that decides a partition's start offset, for every owner that
starts a partition -- the replicator at process start and on a hand-over between workers,
and the Spark executor on a hand-over to or from it. Call `resume_points` with the
partitions about to start; it reads, per partition, the target from the last exactly
mapped point (the newest offset-map run) to the target's end and the same number of source
records from the mapped source offset, and lets `mirrorline.core.tail_match` decide.

The mapped point is the newest of the offset map's last run and the newest offset sync.
A partition without one (its first copies landed, the owner crashed before anything mapped
them) is matched from the remote partition's start instead, against the source from where
the owner would start anyway (`mirrorline.core.unmapped_tail`, read by
`mirrorline.kafka.unmapped_tail`).
Cost is bounded: the target tail holds what was acknowledged since that point (about
`offset.lag.max` records with offset syncs on, up to a second of copying without) plus
what was in flight; a tail longer than
`MAX_TAIL_RECORDS` is not read further and the partition falls back to durable progress.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from aiokafka import TopicPartition

from mirrorline.core.offset_map import OffsetMap
from mirrorline.core.tail_match import (
    Anchor,
    ResumePoint,
    TailMatch,
    Verdict,
    decide,
    match_tail,
)
from mirrorline.core.unmapped_tail import UnmappedStart, unmapped_start
from mirrorline.core.wire import OffsetSync
from mirrorline.kafka.ranges import Range, read_or_note
from mirrorline.kafka.unmapped_tail import match_unmapped

log = logging.getLogger(__name__)

#: The longest target tail matched; beyond it the partition falls back to progress.
MAX_TAIL_RECORDS = 200_000

__all__ = ["MAX_TAIL_RECORDS", "anchor_for", "log_resume_point", "resume_points"]


def anchor_for(offset_map: OffsetMap, syncs: Mapping[tuple[str, int], OffsetSync],
               topic: str, partition: int) -> Anchor | None:
    """The newest record known to be on the target: the offset map's newest run's last
    record, or the newest offset sync, whichever lies further on the target."""
    found: list[Anchor] = []
    last = offset_map.last(topic, partition)
    if last is not None:
        found.append(Anchor(last.upstream_end - 1, last.downstream_end - 1, "offset map"))
    sync = syncs.get((topic, partition))
    if sync is not None:
        found.append(Anchor(sync.upstream_offset, sync.downstream_offset, "offset sync"))
    return max(found, key=lambda a: a.target_offset, default=None)


async def resume_points(*, source_consumer: Mapping[str, Any],
                        target_consumer: Mapping[str, Any], offset_map: OffsetMap,
                        partitions: Mapping[TopicPartition, str],
                        progress: Mapping[tuple[str, int], int],
                        offset_syncs: Mapping[tuple[str, int], OffsetSync] | None = None,
                        reset: str | None = None,
                        timeout: float = 15.0) -> dict[TopicPartition, ResumePoint]:
    """Start point of each source partition in `partitions` (-> its remote topic).

    `progress`: durable next offset per (topic, partition); `offset_map` and
    `offset_syncs` (newest per partition, `mirrorline.kafka.sync_tail`): as current as the
    caller can make them; `reset`: the source consumer's ``auto.offset.reset``, to match
    partitions without a mapped point from the remote partition's start (None: do not).
    Never raises for one partition's trouble: a tail that cannot be read is a tail that
    cannot be matched.
    """
    syncs = offset_syncs or {}
    anchors = {tp: a for tp in partitions
               if (a := anchor_for(offset_map, syncs, tp.topic, tp.partition)) is not None}
    unmapped: dict[TopicPartition, tuple[str, UnmappedStart]] = {}
    if reset is not None:
        for tp in partitions:
            start = unmapped_start(progress.get((tp.topic, tp.partition)), reset)
            if tp not in anchors and start is not None:
                unmapped[tp] = (partitions[tp], start)
    matches, from_start = await asyncio.gather(
        _mapped(source_consumer, target_consumer, anchors, partitions, timeout),
        match_unmapped(source_consumer=source_consumer, target_consumer=target_consumer,
                       partitions=unmapped, bound=MAX_TAIL_RECORDS, timeout=timeout))
    points: dict[TopicPartition, ResumePoint] = {}
    for tp in partitions:
        match = matches[tp] if tp in anchors else from_start.get(tp)
        points[tp] = decide(f"{tp.topic}-{tp.partition}",
                            progress=progress.get((tp.topic, tp.partition)), match=match)
    return points


async def _mapped(source_consumer: Mapping[str, Any], target_consumer: Mapping[str, Any],
                  anchors: Mapping[TopicPartition, Anchor],
                  partitions: Mapping[TopicPartition, str],
                  timeout: float) -> dict[TopicPartition, TailMatch]:
    """Match the tails of the partitions with a mapped point, from that point."""
    if not anchors:
        return {}
    started = time.monotonic()
    targets = {tp: Range(a.target_offset, MAX_TAIL_RECORDS + 1) for tp, a in anchors.items()}
    await read_or_note(target_consumer, {TopicPartition(partitions[tp], tp.partition): r
                                         for tp, r in targets.items()}, timeout, "target")
    target_read = time.monotonic()
    sources = {tp: Range(anchors[tp].source_offset, len(r.records) + 1)
               for tp, r in targets.items()
               if not r.error and not r.truncated and r.records}
    await read_or_note(source_consumer, sources, timeout, "source")
    matches = {tp: _match(a, targets[tp], sources.get(tp)) for tp, a in anchors.items()}
    log.debug("tails of %d partitions: target read %.3fs, source read and match %.3fs",
              len(anchors), target_read - started, time.monotonic() - target_read)
    return matches


def _match(anchor: Anchor, target: Range, source: Range | None) -> TailMatch:
    if target.error:
        return TailMatch(None, f"reading the target from offset {anchor.target_offset}: "
                               f"{target.error}")
    if target.truncated:
        return TailMatch(None, f"more than {MAX_TAIL_RECORDS} records on the target after "
                               f"the mapped point (target offset {anchor.target_offset})")
    if source is not None and source.error:
        return TailMatch(None, f"reading the source from offset {anchor.source_offset}: "
                               f"{source.error}")
    return match_tail(anchor, target.records, source.records if source is not None else [])


def log_resume_point(flow: str, point: ResumePoint) -> None:
    """Say what `resume_points` decided, at the level an operator needs."""
    if point.verdict is Verdict.STOP:
        log.error("%s %s", flow, point.message)
    elif point.verdict is Verdict.FALLBACK or point.duplicates:
        log.warning("%s %s", flow, point.message)
    elif point.message:
        log.info("%s %s", flow, point.message)
