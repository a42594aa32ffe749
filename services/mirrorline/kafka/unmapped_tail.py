"""Reads for a match from the remote partition's start (no exactly mapped point).

`mirrorline.core.unmapped_tail` says what is compared; this module reads it, in three
bounded rounds so that a remote topic full of unrelated records costs two records per
partition, not a tail of up to the tail bound (`mirrorline.kafka.resume.MAX_TAIL_RECORDS`):

1. the remote partition's first readable record (an empty or missing remote partition
   ends it here: nothing to match, nothing to repeat -- the common fresh start);
2. the first source record from where this owner would start -- and where that is durable
   progress and the two differ, the source's first record too (progress written before
   the first offset sync and offset-map run: the copies began at the source's start);
3. only where the remote partition's first record is one of those: the remote partition
   from there to its end (at most the bound + 1) and as many source records, both at
   once.
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
    starts = {tp: partitions[tp][1] for tp in held}
    firsts = {tp: _source_range(starts[tp], 1) for tp in held}
    await read_or_note(source_consumer, firsts, left(), "source")
    agreed: dict[TopicPartition, int] = {}
    refused: dict[TopicPartition, TailMatch] = {}
    for tp, head in held.items():
        start, first = starts[tp], firsts[tp]
        if first.error:
            out[tp] = _unreadable_source(start, first.error)
            continue
        match = match_from_start(start, head.records, first.records)
        assert match is not None  # the target holds a record
        if not match.ok:
            refused[tp] = match
            continue
        agreed[tp] = _read_limit(head, bound)
    # Durable progress whose copies were never mapped (the owner crashed after writing
    # progress, before its first offset sync and offset-map run): the remote partition
    # then starts with the copy of the source's first record, not of the progress one.
    # Matched from the source's start instead, and taken only if the match reaches the
    # progress (below): every record up to where copying resumes is then on the target.
    again = {tp: UnmappedStart(None) for tp in refused if starts[tp].offset is not None}
    if again:
        heads_again = {tp: _source_range(start, 1) for tp, start in again.items()}
        await read_or_note(source_consumer, heads_again, left(), "source")
        for tp, start in again.items():
            first = heads_again[tp]
            if first.error or not first.records:
                continue
            match = match_from_start(start, held[tp].records, first.records)
            if match is not None and match.ok:
                starts[tp], firsts[tp] = start, first
                del refused[tp]
                agreed[tp] = _read_limit(held[tp], bound)
    out.update(refused)
    targets = {tp: Range(held[tp].records[0].offset, bound + 1) for tp in agreed}
    sources = {tp: Range(firsts[tp].records[0].offset, limit) for tp, limit in agreed.items()}
    rest = left()
    await asyncio.gather(
        read_or_note(target_consumer, {remote[tp]: r for tp, r in targets.items()}, rest,
                     "target"),
        read_or_note(source_consumer, sources, rest, "source"))
    for tp in agreed:
        match = _match(starts[tp], targets[tp], sources[tp], bound)
        progress = partitions[tp][1].offset
        if progress is not None and starts[tp].offset is None and match.ok and \
                (match.resume_offset or 0) < progress:
            # The target holds less than durable progress says: start there, as before.
            match = TailMatch(None, f"there is no exactly mapped point and the remote "
                                    f"partition, a copy from the source's start, ends before "
                                    f"durable progress {progress} (at source offset "
                                    f"{match.resume_offset})")
        out[tp] = match
    return out


def _read_limit(head: Range, bound: int) -> int:
    """How many records to read from the remote partition's start (`head`): those it
    holds, at most the bound, plus one to tell a longer partition."""
    span = (head.end or 0) - head.records[0].offset  # records on the target, at most
    return min(span, bound) + 1


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
