"""Matching a remote partition that has no exactly mapped point: from its very start.

A partition's first offset-map run is written as soon as its first copies are
acknowledged, its first offset sync soon after (syncs of a partition behind wait for the
flush). A crash in between, one round trip to the target, leaves copies on the
target and nothing that maps them: without more, the next owner starts from durable
progress or ``auto.offset.reset`` and copies those records a second time.

The gap closes with a *candidate* anchor: the remote partition's first readable record
against the first source record at the position this owner would start from anyway --
durable progress when there is any, else the source's first record (``auto.offset.reset``
other than ``latest``). Progress can also be written before the first offset sync and
offset-map run; the remote partition then starts with the copy of the source's first
record, which `mirrorline.kafka.unmapped_tail` tries as a second candidate, taken only
when the match reaches the progress. The two are matched record by record exactly like a mapped tail
(`mirrorline.core.tail_match.match_tail`: position, key, value, headers, timestamp).

Why this cannot skip a record: a match proves that every source record from the start
position up to the resume point is on the target, and the start position is where the
owner would begin without the match -- nothing before it was going to be copied. When the
records differ in any way (a topic that pre-existed, another writer, copies that began
elsewhere) the answer is "not matched" and the owner starts where it would have started,
loudly. With ``auto.offset.reset = latest`` and no progress there is no defined start (the
source's end moves on), so nothing is matched.

Pure logic without I/O: `mirrorline.kafka.unmapped_tail` reads the records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mirrorline.core.tail_match import Anchor, Comparable, TailMatch, match_tail, same_record

__all__ = ["BASIS", "UnmappedStart", "match_from_start", "starts_at_source_start",
           "unmapped_start"]

#: What the candidate anchor is, for messages.
BASIS = "remote partition's start"


def starts_at_source_start(reset: str) -> bool:
    """Does a partition without durable progress start at the source's first record?
    Every ``auto.offset.reset`` but ``latest`` does (``none`` is treated as
    ``earliest``: a mirror has no committed offsets to fail over)."""
    return reset.strip().lower() != "latest"


@dataclass(frozen=True)
class UnmappedStart:
    """Where this owner would start a partition without a match."""

    #: Durable progress; None: the source's first readable record.
    offset: int | None

    def describe(self) -> str:
        if self.offset is None:
            return "the source's start (auto.offset.reset, no durable progress)"
        return f"durable progress {self.offset}"


def unmapped_start(progress: int | None, reset: str) -> UnmappedStart | None:
    """The source side of a match from the remote partition's start, or None when there
    is no defined start to match against (``latest`` without progress)."""
    if progress is not None:
        return UnmappedStart(progress)
    if starts_at_source_start(reset):
        return UnmappedStart(None)
    return None


def match_from_start(start: UnmappedStart, target: Sequence[Comparable],
                     source: Sequence[Comparable]) -> TailMatch | None:
    """Match `target` (the remote partition from its first readable record, in order)
    against `source` (records from `start` on, in order; one more than `target` holds
    unless the source ends sooner). None: the remote partition holds nothing, so there is
    nothing to match and nothing to repeat. Also decides on first records alone (one of
    each): a cheap check before reading the rest."""
    if not target:
        return None
    first = target[0]
    if not source:
        return TailMatch(None, f"there is no exactly mapped point and the remote partition "
                               f"holds records (from target offset {first.offset}) while "
                               f"the source holds none from {start.describe()}: the remote "
                               "topic pre-existed or someone else wrote into it")
    if not same_record(first, source[0]):
        return TailMatch(None, f"there is no exactly mapped point and the remote "
                               f"partition's first record (target offset {first.offset}) "
                               f"is not a copy of source offset {source[0].offset}, the "
                               f"first record from {start.describe()}: the remote topic "
                               "pre-existed, someone else wrote into it, or earlier copies "
                               "started elsewhere")
    return match_tail(Anchor(source[0].offset, first.offset, BASIS), target, source)
