"""Reads for a match from the remote partition's start (no exactly mapped point).

`mirrorline.core.unmapped_tail` says what is compared; this module reads it, in three
bounded rounds so that a remote topic full of unrelated records costs two records per
partition, not a tail of up to the tail bound (`mirrorline.kafka.resume.MAX_TAIL_RECORDS`):

1. the remote partition's first readable record (an empty or missing remote partition
   ends it here: nothing to match, nothing to repeat -- the common fresh start);
2. the first source record from where this owner would start;
3. only where those two are the same record: the remote partition from that record to
   its end (at most the bound + 1) and as many source records, both at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from aiokafka import TopicPartition

from mirrorline.core.tail_match import TailMatch
from mirrorline.core.unmapped_tail import UnmappedStart, match_from_start
from mirrorline.kafka.ranges import FIRST, Range, read_or_note

__all__ = ["match_unmapped"]


async def match_unmapped(*, source_consumer: Mapping[str, Any],
                         target_consumer: Mapping[str, Any],
                         partitions: Mapping[TopicPartition, tuple[str, UnmappedStart]],
                         bound: int, timeout: float) -> dict[TopicPartition, TailMatch]:
    """Match each source partition in `partitions` (-> its remote topic and where this
    owner would start it) from the remote partition's start; a remote partition with more
    than `bound` records is not matched. Partitions left out of the answer have an empty
    or missing remote partition. Never raises for one partition's trouble: what cannot be
    read cannot be matched. `timeout` bounds all three rounds together."""
    if not partitions:
        return {}
    deadline = time.monotonic() + timeout

    def left() -> float:
        return max(deadline - time.monotonic(), 1.0)

    remote = {tp: TopicPartition(topic, tp.partition) for tp, (topic, _) in partitions.items()}
    heads = {tp: Range(FIRST, 1) for tp in partitions}
    await read_or_note(target_consumer, {remote[tp]: r for tp, r in heads.items()},
                       left(), "target")
    out: dict[TopicPartition, TailMatch] = {}
    held: dict[TopicPartition, Range] = {}
    for tp, head in heads.items():
        if head.missing or (not head.error and not head.records):
            continue
        if head.error:
            out[tp] = TailMatch(None, "there is no exactly mapped point and the remote "
                                      f"partition cannot be read from its start: {head.error}")
        else:
            held[tp] = head
    firsts = {tp: _source_range(partitions[tp][1], 1) for tp in held}
    await read_or_note(source_consumer, firsts, left(), "source")
    agreed: dict[TopicPartition, int] = {}
    for tp, head in held.items():
        start, first = partitions[tp][1], firsts[tp]
        if first.error:
            out[tp] = _unreadable_source(start, first.error)
            continue
        match = match_from_start(start, head.records, first.records)
        assert match is not None  # the target holds a record
        if not match.ok:
            out[tp] = match
            continue
        span = (head.end or 0) - head.records[0].offset  # records on the target, at most
        agreed[tp] = min(span, bound) + 1
    targets = {tp: Range(held[tp].records[0].offset, bound + 1) for tp in agreed}
    sources = {tp: Range(firsts[tp].records[0].offset, limit) for tp, limit in agreed.items()}
    rest = left()
    await asyncio.gather(
        read_or_note(target_consumer, {remote[tp]: r for tp, r in targets.items()}, rest,
                     "target"),
        read_or_note(source_consumer, sources, rest, "source"))
    for tp in agreed:
        out[tp] = _match(partitions[tp][1], targets[tp], sources[tp], bound)
    return out


def _source_range(start: UnmappedStart, limit: int) -> Range:
    return Range(FIRST if start.offset is None else start.offset, limit)


def _unreadable_source(start: UnmappedStart, error: str) -> TailMatch:
    return TailMatch(None, "there is no exactly mapped point and the source cannot be read "
                           f"from {start.describe()}: {error}")


def _match(start: UnmappedStart, target: Range, source: Range, bound: int) -> TailMatch:
    if target.error:
        return TailMatch(None, "there is no exactly mapped point and the remote partition "
                               "cannot be read from its start (target offset "
                               f"{target.start}): {target.error}")
    if target.truncated:
        return TailMatch(None, f"there is no exactly mapped point and the remote partition "
                               f"holds more than {bound} records from its start "
                               f"(target offset {target.start})")
    if source.error:
        return _unreadable_source(start, source.error)
    if source.truncated and len(source.records) <= len(target.records):
        # The remote partition grew between the rounds (someone still writes into it):
        # the source records after those read are unknown here, do not guess.
        return TailMatch(None, "there is no exactly mapped point and the remote partition "
                               "grew while it was read (someone else still writes into it)")
    match = match_from_start(start, target.records, source.records)
    assert match is not None
    return match
