"""Lag of a mirrored partition, measured against the source's log end.

A partition's lag is what the source holds that the target does not: in records, the
source's log end minus the next offset to copy; in time, the age of the oldest record
not copied yet -- the timestamp of the record at the next offset to copy, compared with
now. Both are measured whoever is fetching: a paused, stalled, erroring or just-added
partition has a log end and a next offset like any other, so it shows its backlog
instead of the 0 that "nothing fetched, nothing known to be behind" used to read as.

`LagBook` keeps what was learnt per partition (the newest log end, the timestamp of the
record at a given offset) and says which timestamps are worth reading: only a lagging
partition's, and again only once its next offset or the source's end moved -- an idle
paused partition costs one read for the whole pause, a busy one at most one per measuring
round (the read's fetch also brings the high watermark, the end every broker gets right).
Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["UNKNOWN", "Lag", "LagBook", "partition_lag"]

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Lag:
    """Records and milliseconds behind the source; -1 where not known (yet)."""

    records: int
    ms: float


UNKNOWN = Lag(-1, -1.0)


def partition_lag(end: int | None, next_offset: int, oldest_timestamp_ms: int | None,
                  now_ms: float) -> Lag:
    """The lag of one partition.

    `end`: the source's log end (None: not known); `next_offset`: the next source offset
    to copy; `oldest_timestamp_ms`: the timestamp of the record at `next_offset` (None:
    not read). Caught up is 0 records and 0 ms; behind with an unread timestamp is the
    records and -1 ms. A record stamped in the future is not negative lag: 0 ms.
    """
    if end is None or next_offset < 0:
        return UNKNOWN
    records = max(0, end - next_offset)
    if records == 0:
        return Lag(0, 0.0)
    if oldest_timestamp_ms is None or oldest_timestamp_ms < 0:
        return Lag(records, -1.0)
    return Lag(records, max(0.0, now_ms - oldest_timestamp_ms))


class LagBook(Generic[K]):
    """What is known about the partitions of one owner, keyed by any partition key."""

    def __init__(self) -> None:
        self._ends: dict[K, int] = {}
        #: key -> (offset read, timestamp of the oldest record at or after it, the end
        #: known when it was read)
        self._stamps: dict[K, tuple[int, int, int | None]] = {}

    def saw_ends(self, ends: Mapping[K, int]) -> None:
        """Log ends just measured (ListOffsets, or a fetch response's high watermark). An
        end never goes back: some brokers answer ListOffsets(latest) short of the end a
        fetch showed (Tansu), and a source that really lost records stops its partition
        loudly anyway (the replicator's truncation check)."""
        for key, end in ends.items():
            self._ends[key] = max(end, self._ends.get(key, end))

    def end(self, key: K, fetched_high: int | None = None) -> int | None:
        """The newest log end known: measured, or from the owner's own fetch responses
        (`fetched_high`) if those are further -- they may be newer than the last
        measurement, never wrong."""
        measured = self._ends.get(key)
        if measured is None:
            return fetched_high
        return measured if fetched_high is None else max(measured, fetched_high)

    def stamps_wanted(self, positions: Mapping[K, int],
                      fetched_high: Mapping[K, int] | None = None,
                      limit: int | None = None) -> dict[K, int]:
        """Partitions behind whose oldest unmirrored record's timestamp is not known, or
        was read before the end moved on, with the offset to read it at (their next
        offset): the ones behind the most first, at most `limit` of them."""
        highs = fetched_high or {}
        wanted: list[tuple[int, K, int]] = []
        for key, offset in positions.items():
            end = self.end(key, highs.get(key))
            if end is None or end <= offset or offset < 0:
                continue
            known = self._stamps.get(key)
            if known is not None and known[0] == offset and known[2] is not None \
                    and end <= known[2]:
                continue
            wanted.append((end - offset, key, offset))
        wanted.sort(key=lambda w: -w[0])
        if limit is not None:
            wanted = wanted[:limit]
        return {key: offset for _, key, offset in wanted}

    def saw_stamp(self, key: K, offset: int, timestamp_ms: int) -> None:
        """The oldest record at or after `offset` has `timestamp_ms` (compacted-away or
        aborted offsets are stood in for by the next record, which is then the oldest
        one not copied). Record the read's high watermark (`saw_ends`) first."""
        self._stamps[key] = (offset, timestamp_ms, self._ends.get(key))

    def lag(self, key: K, next_offset: int, now_ms: float,
            fetched_high: int | None = None) -> Lag:
        stamp = self._stamps.get(key)
        timestamp = stamp[1] if stamp is not None and stamp[0] == next_offset else None
        return partition_lag(self.end(key, fetched_high), next_offset, timestamp, now_ms)

    def retain(self, keys: Iterable[K]) -> None:
        """Forget every partition but `keys` (the ones still owned)."""
        keep = set(keys)
        for table in (self._ends, self._stamps):
            for key in [k for k in table if k not in keep]:
                del table[key]
