"""Where a partition resumes: matched against what the target actually holds.

Durable progress is written after the target acknowledged records, in rounds, so after a
crash the target usually holds more than progress says: the batches acknowledged since
the last progress round, and whatever was in flight and landed anyway. Copying from
durable progress alone copies those records a second time. Mirrorline owns the write
order of every remote partition (one ordered stream, records in source order), so the
new owner can instead *read* what is there and continue right after it.

The match starts at an **anchor**: a source record known to have landed at a target
offset (the newest run of the offset map or the newest offset sync gives one; without
either, `mirrorline.core.unmapped_tail` tries the remote partition's first record). From
there the target records up to the target's end are compared one by one, in order, with
the source records from the anchor on -- position first, then key, value, headers and
timestamp. The source may have gaps in its offsets (compaction, transaction markers):
records are compared by position in the sequence, never by offset arithmetic.

What the target can hold after the anchor, and how each case is recognised:
* the next source record -- copied; the resume point moves past it;
* an earlier source record again -- a produce that was retried after the broker had
  already written it (no idempotent producer): reported as a duplicate, never undone;
* anything else -- a record someone else wrote, a target that was recreated, or a source
  that was truncated: the tail cannot be matched and the caller falls back to durable
  progress, loudly.

The match also *proves* that the record before the resume point is on the target. A
durable progress beyond the resume point with a source record in between (a forged or
restored progress topic) would skip that record: the verdict is then to stop the
partition loudly instead (see :func:`decide`).

Pure logic without I/O: `mirrorline.kafka.resume` reads the records and calls this.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Anchor", "Duplicate", "Landed", "ResumePoint", "TailMatch", "Verdict",
           "already_landed", "decide", "match_tail", "same_record"]

#: aiokafka's timestamp type for a timestamp the broker set on append (not the producer's).
LOG_APPEND_TIME = 1


class Comparable(Protocol):
    """The parts of a consumed record the match looks at."""

    @property
    def offset(self) -> int: ...

    @property
    def timestamp(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


@dataclass(frozen=True)
class Anchor:
    """Source record ``source_offset`` is known to be at target offset ``target_offset``."""

    source_offset: int
    target_offset: int
    #: Where the anchor comes from ("offset map"), for messages.
    basis: str


@dataclass(frozen=True)
class Duplicate:
    """A source record the target holds a second time (a retried produce)."""

    target_offset: int
    source_offset: int


@dataclass(frozen=True)
class TailMatch:
    """The outcome of matching one partition's target tail.

    ``resume_offset``: the next source offset to copy (right after the last source record
    found on the target), or None when the tail cannot be matched (``reason`` says why).
    ``next_source_offset``: the first source record *not* on the target, when it was read.
    """

    resume_offset: int | None
    reason: str = ""
    #: Source records found on the target from the anchor on (the anchor included).
    matched: int = 0
    duplicates: tuple[Duplicate, ...] = ()
    #: Target offset of the last source record found there.
    last_target_offset: int | None = None
    next_source_offset: int | None = None
    #: One past the last target record read: where this owner's copies continue.
    target_end: int | None = None
    #: What the match started from (the anchor's basis), for messages.
    basis: str = ""

    @property
    def ok(self) -> bool:
        return self.resume_offset is not None


def same_record(target: Comparable, source: Comparable) -> bool:
    """Is `target` a copy of `source`? Key, value, headers and timestamp; a timestamp the
    target broker set itself (``LogAppendTime`` topics) cannot be compared and is not."""
    if target.key != source.key or target.value != source.value:
        return False
    if getattr(target, "timestamp_type", 0) != LOG_APPEND_TIME \
            and target.timestamp != source.timestamp:
        return False
    return _headers(target.headers) == _headers(source.headers)


def _headers(headers: Sequence[tuple[str, bytes]] | None) -> list[tuple[str, bytes]]:
    return [(k, bytes(v) if v is not None else b"") for k, v in headers or ()]


def match_tail(anchor: Anchor, target: Sequence[Comparable],
               source: Sequence[Comparable]) -> TailMatch:
    """Match `target` (records from ``anchor.target_offset`` to the target's end, in
    order) against `source` (records from ``anchor.source_offset`` on, in order; at least
    one more than `target` has, unless the source ends sooner)."""
    where = f"target offset {anchor.target_offset}"
    if not target or target[0].offset != anchor.target_offset:
        return TailMatch(None, f"the record the {anchor.basis} places at {where} (source "
                               f"offset {anchor.source_offset}) is no longer on the target "
                               "(target truncated, recreated or trimmed by retention)")
    if not source or source[0].offset != anchor.source_offset:
        return TailMatch(None, f"source offset {anchor.source_offset} no longer exists on "
                               "the source (truncated, compacted or removed by retention)")
    if not same_record(target[0], source[0]):
        return TailMatch(None, f"{where} does not hold source offset "
                               f"{anchor.source_offset} as the {anchor.basis} says (the "
                               "remote partition was recreated or written by someone else)")
    duplicates: list[Duplicate] = []
    high = 1      # source[:high] are on the target
    expect = 1    # the source record the next target record most likely copies
    last_target = target[0].offset
    for t in target[1:]:
        found = _locate(t, source, expect, high)
        if found is None:
            if high >= len(source):
                return TailMatch(None, f"target offset {t.offset} holds a record beyond the "
                                       f"source's end (source offset {source[-1].offset} is "
                                       "its last): the source was truncated or someone "
                                       "else wrote into the remote topic")
            return TailMatch(None, f"target offset {t.offset} holds a record that is not a "
                                   f"copy of source offset {source[high].offset} nor of any "
                                   "record before it: someone else wrote into the remote "
                                   "topic")
        if found < high:
            duplicates.append(Duplicate(t.offset, source[found].offset))
        else:
            high, last_target = found + 1, t.offset
        expect = found + 1
    return TailMatch(source[high - 1].offset + 1, matched=high, duplicates=tuple(duplicates),
                     last_target_offset=last_target,
                     next_source_offset=source[high].offset if high < len(source) else None,
                     target_end=target[-1].offset + 1, basis=anchor.basis)


def _locate(t: Comparable, source: Sequence[Comparable], expect: int, high: int) -> int | None:
    """Index of the source record `t` copies: the expected one, else the next new one,
    else (a retried batch starting over) the newest earlier one; None if none."""
    for i in (expect, high):
        if i < len(source) and same_record(t, source[i]):
            return i
    for i in range(min(high, len(source)) - 1, -1, -1):
        if same_record(t, source[i]):
            return i
    return None


@dataclass(frozen=True)
class Landed:
    """How much of a batch whose produce failed is on the target all the same."""

    #: Leading records of the batch found on the target (in order).
    count: int
    #: Target offset of the newest copy of the first of them (None when count is 0).
    base: int | None
    #: Target records that repeat a record already found (retried produce).
    duplicates: int


def already_landed(target: Sequence[Comparable], batch: Sequence[Comparable]) -> Landed | None:
    """`target`: every record after the last one known to be there; `batch`: the records
    of the failed produce, in order. None: the target holds something else (someone else
    writes into the remote topic), so nothing can be concluded."""
    high = expect = duplicates = 0
    newest: dict[int, int] = {}
    for t in target:
        found = _locate(t, batch, expect, high)
        if found is None:
            return None
        if found < high:
            duplicates += 1
        else:
            high = found + 1
        newest[found] = t.offset
        expect = found + 1
    base = newest[high - 1] - (high - 1) if high else None
    return Landed(high, base, duplicates)


class Verdict(enum.Enum):
    #: Nothing to match against: start from durable progress (or the reset policy).
    PROGRESS = "progress"
    #: The tail matched: start right after the last source record on the target.
    MATCHED = "matched"
    #: The tail could not be matched: start from durable progress, loudly.
    FALLBACK = "fallback"
    #: Durable progress claims records the target does not hold: do not start.
    STOP = "stop"


@dataclass(frozen=True)
class ResumePoint:
    """Where a partition starts (None: ``auto.offset.reset`` decides) and why."""

    offset: int | None
    verdict: Verdict
    message: str
    duplicates: tuple[Duplicate, ...] = ()
    #: One past the last target record when the tail matched (where copies continue).
    target_end: int | None = None


def decide(where: str, *, progress: int | None, match: TailMatch | None) -> ResumePoint:
    """Combine durable progress (next offset to copy) with the tail match of partition
    `where` ("topic-partition", for messages; `match` None: nothing was matched, there is
    no mapped point and nothing on the target to match from). Never an offset that skips
    a record."""
    if match is None:
        note = (f"{where}: no exactly mapped point on the target to match from (nothing "
                "in the offset map or the newest offset syncs, and no record in the remote "
                "partition); starting from durable progress"
                if progress is not None else "")
        return ResumePoint(progress, Verdict.PROGRESS, note)
    if not match.ok:
        start = f"durable progress {progress}" if progress is not None else \
            "the reset policy (no durable progress)"
        return ResumePoint(progress, Verdict.FALLBACK,
                           f"{where}: tail on the target not matched: {match.reason}; "
                           f"resuming from {start}, records after it may be copied twice")
    resume = match.resume_offset
    assert resume is not None
    dup = ""
    if match.duplicates:
        first = match.duplicates[0]
        dup = (f"; the target holds {len(match.duplicates)} records twice (a retried "
               f"produce), first at target offset {first.target_offset} = source offset "
               f"{first.source_offset}")
    skipped = match.next_source_offset
    if progress is not None and skipped is not None and resume <= skipped < progress:
        return ResumePoint(None, Verdict.STOP, (
                f"{where}: durable progress says offsets below {progress} are on the target, "
                f"but source offset {match.next_source_offset} is not: the target holds "
                f"source records only up to offset {resume - 1} (target offset "
                f"{match.last_target_offset}). The progress topic is ahead of the truth "
                "(forged or restored); the partition is stopped instead of skipping "
                f"{progress - skipped} offsets"), match.duplicates)
    if progress is not None and progress > resume:
        resume = progress  # only offsets without records lie in between
    gained = "" if progress is None or resume == progress else \
        f" ({resume - progress} offsets beyond durable progress {progress} already there)"
    basis = f" (matched from the {match.basis})" if match.basis else ""
    return ResumePoint(resume, Verdict.MATCHED,
                       f"{where}: resuming at source offset {resume}, right after the last "
                       f"record on the target{gained}{basis}{dup}", match.duplicates,
                       match.target_end)
