"""Mirrorline's dense offset map: where every replicated source offset landed on the target.

After every batch the target acknowledged, the replicator publishes runs "source offsets
``[u, u + count)`` landed at ``[d, d + count)``" (``mirrorline.v1.OffsetMapRecord``).  Unlike
MM2's sparse offset syncs (OffsetSyncStore) this lets a committed offset be translated exactly.

Model and assumptions
---------------------
* Runs of one partition are added in the order they were written (the order of the map topic).
* The target partition is append-only: a run lands after every run added before it.  A run
  that starts *below* the end of the previous one means the target partition was recreated or
  truncated: the positions the map knew no longer exist, so the partition's history is dropped.
* A run that starts below where replication had reached upstream (``mapped_until``) is a
  restart of the replicator re-copying a suffix.  From that upstream offset on, everything the
  map knew is stale: those records are copied again after the current log end.  So the older
  runs are trimmed at the restart point (partly covered ones) or dropped (fully covered ones,
  and ones entirely beyond it), and the newest copy of each offset is the one kept.

With those rules the retained runs of a partition never overlap, and they are sorted the same
way by upstream offset, by downstream offset and by read order; a steady replication keeps a
single run per partition because contiguous runs read one after the other are merged.

Locating a consumer (:meth:`OffsetMap.locate`)
----------------------------------------------
"Where will a consumer whose committed source offset is ``g`` next read on the target?" with
``M = mapped_until`` (upstream end of the most recently added run) and ``E`` the downstream end
of that run:

1. ``g > M``: not exact: ``E`` with ``max_duplicates = g - M`` -- the source records in
   ``[M, g)`` (the consumer already has them) are mirrored after ``E``, each at most once.
2. ``g == M``: exact: ``E`` (the consumer is exactly where replication had reached).
3. ``g`` inside a retained run: exact: ``downstream_start + (g - upstream_start)``.
4. ``g`` in a gap between retained runs (the source had no records there: compaction,
   transaction markers, retention): exact: the ``downstream_start`` of the next run.
5. ``g`` before the history (the first run -- or an empty run added before it, which says
   the source has no record from there to the first run: the replicator publishes one when
   it started fetching below its first record, as on a compacted topic --, or the offset
   given to ``forget_before``: records copied before the map existed, or forgotten): None --
   the caller falls back to MM2's offset syncs.

Rules 1 and 2 take precedence over 3: offsets at or beyond ``M`` are stale copies that will be
mirrored again after ``E`` (they are dropped anyway, see above).  An exact answer means: from
that position the consumer reads every source record at or after ``g`` (mirrored ones now,
the rest later) and no record before ``g`` -- apart from records the replicator itself copied
twice, which every consumer of the target sees (partitions resume from what the target holds,
see :mod:`mirrorline.core.tail_match`, so those are only produces the client retried after the
broker had written them).  Answers are as of the runs read so far: runs
not yet published (a restart that has not written a batch yet) are unknown to the map.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from mirrorline.v1.offset_map_pb2 import OffsetMapRecord

__all__ = ["Located", "OffsetMap", "Run"]

_Key = tuple[str, int]


@dataclass(frozen=True)
class Run:
    """Source offsets ``[upstream_start, upstream_end)`` landed at ``[downstream_start, ...)``.

    ``seq`` is the run's position in its partition's read order (0, 1, ...); later wins.  A
    run merged from several consecutive ones carries the ``seq`` of the newest.
    """

    upstream_start: int
    count: int
    downstream_start: int
    seq: int

    @property
    def upstream_end(self) -> int:
        """One past the last upstream offset of the run (exclusive)."""
        return self.upstream_start + self.count

    @property
    def downstream_end(self) -> int:
        """One past the last downstream offset of the run (exclusive)."""
        return self.downstream_start + self.count


@dataclass(frozen=True)
class Located:
    """Where a consumer at a source offset next reads on the target.

    ``exact``: it sees every record once from there.  Otherwise at most ``max_duplicates``
    records it already consumed on the source are seen again (none is ever skipped).
    """

    downstream: int
    exact: bool
    max_duplicates: int


class _Partition:
    """Retained runs of one partition: non-overlapping, sorted, plus the newest run."""

    __slots__ = ("floor", "last", "next_seq", "runs", "starts")

    def __init__(self) -> None:
        self.runs: list[Run] = []
        self.starts: list[int] = []  # upstream_start of each run, for bisection
        self.last: Run | None = None  # most recently added run (merged), kept by forget_before
        self.next_seq = 0
        # Set by forget_before: the history speaks for offsets from here on (a leading gap up
        # to the first run is still known to be a gap).  None: from the first run on.
        self.floor: int | None = None

    def clear(self) -> None:
        self.runs.clear()
        self.starts.clear()
        self.floor = None

    def history_start(self) -> int | None:
        if self.floor is not None:
            return self.floor
        return self.runs[0].upstream_start if self.runs else None

    def truncate_from(self, upstream: int) -> None:
        """Drop everything at or after ``upstream``; trim the run straddling it."""
        idx = bisect_left(self.starts, upstream)
        del self.runs[idx:]
        del self.starts[idx:]
        if self.runs and self.runs[-1].upstream_end > upstream:
            r = self.runs[-1]
            self.runs[-1] = Run(r.upstream_start, upstream - r.upstream_start,
                                r.downstream_start, r.seq)

    def forget_before(self, upstream: int) -> None:
        """Drop everything before ``upstream``; trim the run straddling it."""
        start = self.history_start()
        if start is None or upstream <= start:
            return
        self.floor = upstream
        idx = bisect_right(self.starts, upstream) - 1  # last run starting at or before it
        if idx < 0:
            return
        if self.runs[idx].upstream_end <= upstream:
            idx += 1
        del self.runs[:idx]
        del self.starts[:idx]
        if self.runs and self.runs[0].upstream_start < upstream:
            r = self.runs[0]
            cut = upstream - r.upstream_start
            self.runs[0] = Run(upstream, r.count - cut, r.downstream_start + cut, r.seq)
            self.starts[0] = upstream

    def append(self, run: Run) -> None:
        if self.runs:
            prev = self.runs[-1]
            if (
                prev.upstream_end == run.upstream_start
                and prev.downstream_end == run.downstream_start
                and prev.seq == run.seq - 1
            ):
                merged = Run(prev.upstream_start, prev.count + run.count,
                             prev.downstream_start, run.seq)
                self.runs[-1] = merged
                self.last = merged
                return
        self.runs.append(run)
        self.starts.append(run.upstream_start)
        self.last = run


def _check_offset(name: str, value: int) -> None:
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


class OffsetMap:
    """Dense offset map per source partition (see the module docstring for the rules)."""

    def __init__(self) -> None:
        self._parts: dict[_Key, _Partition] = {}

    def add(
        self, topic: str, partition: int, upstream_start: int, count: int, downstream_start: int
    ) -> None:
        """Fold in one run read from the map topic (runs must be added in read order).

        An empty run (``count == 0``) marks a gap: the source has no record from
        ``upstream_start`` up to the next run. Before any history it starts the history there
        (a leading gap, e.g. a compacted topic's first offsets); otherwise it is ignored (the
        gap between runs says as much). A run landing below the end of the previous one (the
        target partition was recreated) drops the partition's history; a run starting below
        ``mapped_until`` (a replicator restart) drops what the map knew from there on.
        """
        _check_offset("upstream_start", upstream_start)
        _check_offset("downstream_start", downstream_start)
        _check_offset("count", count)
        part = self._parts.get((topic, partition))
        if count == 0:
            if part is None or (part.last is None and part.floor is None):
                part = part or self._parts.setdefault((topic, partition), _Partition())
                part.floor = upstream_start
            return
        if part is None:
            part = self._parts[(topic, partition)] = _Partition()
        run = Run(upstream_start, count, downstream_start, part.next_seq)
        part.next_seq += 1
        last = part.last
        if last is not None:
            if downstream_start < last.downstream_end:
                part.clear()
            elif upstream_start < last.upstream_end:
                part.truncate_from(upstream_start)
        if part.floor is not None and upstream_start < part.floor:
            # Copied again from below what was forgotten: every retained run was at or above
            # the floor, so none is left and the history starts with this run.
            part.floor = None
        part.append(run)

    def add_record(self, record: OffsetMapRecord) -> None:
        """Fold in every run of one ``OffsetMapRecord``, in order.

        The whole record is checked first: an impossible one (a negative count or offset, a
        negative partition) raises ValueError and changes nothing, so the reader can skip
        it and go on with the next.
        """
        if record.partition < 0:
            raise ValueError(f"partition must be >= 0, got {record.partition}")
        for run in record.runs:
            _check_offset("upstream_start", run.upstream_start)
            _check_offset("downstream_start", run.downstream_start)
            _check_offset("count", run.count)
        for run in record.runs:
            self.add(record.topic, record.partition, run.upstream_start, run.count,
                     run.downstream_start)

    def runs(self, topic: str, partition: int) -> list[Run]:
        """Retained runs, sorted by upstream (equivalently downstream) offset."""
        part = self._parts.get((topic, partition))
        return [] if part is None else list(part.runs)

    def partitions(self) -> list[tuple[str, int]]:
        """Source partitions the map has seen a run for."""
        return [key for key, part in self._parts.items() if part.last is not None]

    def last(self, topic: str, partition: int) -> Run | None:
        """The most recently added run (merged with its contiguous predecessors).

        It stays known after :meth:`forget_before` dropped it from :meth:`runs`: it records
        where replication had reached.
        """
        part = self._parts.get((topic, partition))
        return None if part is None else part.last

    def mapped_until(self, topic: str, partition: int) -> int | None:
        """Upstream end of the most recently added run: where replication had reached."""
        last = self.last(topic, partition)
        return None if last is None else last.upstream_end

    def forget_before(self, topic: str, partition: int, upstream: int) -> None:
        """Drop the history of source offsets below ``upstream`` (e.g. aged out upstream).

        Offsets below it then locate to None, offsets at or above it locate as before;
        ``last``/``mapped_until`` are kept (so offsets at or beyond ``mapped_until`` still
        locate by rules 1 and 2).
        """
        part = self._parts.get((topic, partition))
        if part is not None:
            part.forget_before(upstream)

    def locate(self, topic: str, partition: int, g: int) -> Located | None:
        """Where a consumer at source offset ``g`` next reads (rules in the module docstring)."""
        _check_offset("offset", g)
        part = self._parts.get((topic, partition))
        if part is None or part.last is None:
            return None
        mapped_until = part.last.upstream_end
        end = part.last.downstream_end
        if g > mapped_until:
            return Located(end, exact=False, max_duplicates=g - mapped_until)
        if g == mapped_until:
            return Located(end, exact=True, max_duplicates=0)
        start = part.history_start()
        if start is None or g < start:
            return None  # before the history
        idx = bisect_right(part.starts, g) - 1
        if idx < 0:  # a leading gap that forget_before kept knowledge of
            return Located(part.runs[0].downstream_start, exact=True, max_duplicates=0)
        run = part.runs[idx]
        if g < run.upstream_end:
            return Located(run.downstream_start + (g - run.upstream_start), True, 0)
        # A gap: the retained runs end at mapped_until > g, so a next run exists.
        return Located(part.runs[idx + 1].downstream_start, exact=True, max_duplicates=0)
