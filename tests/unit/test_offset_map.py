"""Mirrorline's dense offset map: merging, restarts, gaps and the `locate` rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirrorline.core.offset_map import Located, OffsetMap, Run
from mirrorline.v1.offset_map_pb2 import OffsetMapRecord, OffsetRun

T, P = "orders", 3


def omap(*runs: tuple[int, int, int]) -> OffsetMap:
    """A map of (T, P) built from (upstream_start, count, downstream_start) runs, in order."""
    m = OffsetMap()
    for up, count, down in runs:
        m.add(T, P, up, count, down)
    return m


def spans(m: OffsetMap) -> list[tuple[int, int, int]]:
    return [(r.upstream_start, r.count, r.downstream_start) for r in m.runs(T, P)]


def exact(downstream: int) -> Located:
    return Located(downstream, exact=True, max_duplicates=0)


# -- runs and merging ---------------------------------------------------------------------------


def test_run_ends_are_exclusive() -> None:
    r = Run(upstream_start=10, count=5, downstream_start=100, seq=0)
    assert (r.upstream_end, r.downstream_end) == (15, 105)


def test_steady_replication_merges_into_one_run() -> None:
    m = OffsetMap()
    for batch in range(100):
        m.add(T, P, batch * 50, 50, 1000 + batch * 50)
    assert m.runs(T, P) == [Run(0, 5000, 1000, 99)]
    assert m.last(T, P) == Run(0, 5000, 1000, 99)
    assert m.mapped_until(T, P) == 5000


def test_interleaved_partitions_still_merge_per_partition() -> None:
    m = OffsetMap()
    for batch in range(10):
        for partition in range(3):
            m.add(T, partition, batch * 10, 10, batch * 10 + partition)
    assert m.partitions() == [(T, 0), (T, 1), (T, 2)]
    for partition in range(3):
        assert m.runs(T, partition) == [Run(0, 100, partition, 9)]


def test_runs_not_contiguous_downstream_are_kept_apart() -> None:
    # A transactional producer's commit marker takes one target offset after every batch.
    m = omap((0, 10, 0), (10, 10, 11), (20, 10, 22))
    assert spans(m) == [(0, 10, 0), (10, 10, 11), (20, 10, 22)]
    assert m.locate(T, P, 10) == exact(11)
    assert m.locate(T, P, 25) == exact(27)
    assert m.locate(T, P, 30) == exact(32)


def test_runs_not_contiguous_upstream_are_kept_apart() -> None:
    assert spans(omap((0, 10, 0), (20, 10, 10))) == [(0, 10, 0), (20, 10, 10)]


def test_empty_runs_are_ignored_and_negative_values_rejected() -> None:
    m = omap((0, 10, 0))
    m.add(T, P, 10, 0, 10)
    m.add(T, P, 10, 10, 10)
    assert m.runs(T, P) == [Run(0, 20, 0, 1)]  # the empty run took no seq: still merged
    with pytest.raises(ValueError):
        m.add(T, P, -1, 1, 0)
    with pytest.raises(ValueError):
        m.add(T, P, 0, -1, 0)
    with pytest.raises(ValueError):
        m.add(T, P, 0, 1, -1)
    with pytest.raises(ValueError):
        m.locate(T, P, -1)


def test_add_record_reads_runs_in_order() -> None:
    m = OffsetMap()
    m.add_record(OffsetMapRecord(topic=T, partition=P, runs=[
        OffsetRun(upstream_start=0, count=5, downstream_start=7),
        OffsetRun(upstream_start=8, count=2, downstream_start=12),
    ]))
    m.add_record(OffsetMapRecord(topic=T, partition=P, runs=[
        OffsetRun(upstream_start=10, count=3, downstream_start=14),
    ]))
    assert m.runs(T, P) == [Run(0, 5, 7, 0), Run(8, 5, 12, 2)]
    assert m.locate(T, P, 6) == exact(12)


def test_unknown_partition() -> None:
    m = omap((0, 10, 0))
    assert m.runs(T, 9) == []
    assert m.last(T, 9) is None
    assert m.mapped_until(T, 9) is None
    assert m.locate(T, 9, 0) is None
    assert m.partitions() == [(T, P)]


# -- restarts -----------------------------------------------------------------------------------


def test_restart_overlap_most_recent_run_wins() -> None:
    # A: up 0..199 -> down 0..199, then the replicator restarts at 100.  B: up 100..299 ->
    # down 200..399.  A's copy of 100..199 is followed by B's copies: B's position is right.
    m = omap((0, 200, 0), (100, 200, 200))
    assert m.runs(T, P) == [Run(0, 100, 0, 0), Run(100, 200, 200, 1)]
    assert m.locate(T, P, 150) == exact(250)
    assert m.locate(T, P, 100) == exact(200)
    assert m.locate(T, P, 99) == exact(99)
    assert m.locate(T, P, 0) == exact(0)
    assert m.mapped_until(T, P) == 300
    assert m.locate(T, P, 300) == exact(400)


def test_restart_drops_the_stale_tail_beyond_the_restart_batch() -> None:
    # After the restart only 100..149 was copied again: A's 150..199 will be copied again after
    # down 250, so a consumer at 170 must not start at A's 170 (it would then read B's copies
    # of 100..149 again: 50 duplicates); 250 repeats at most 150..169.
    m = omap((0, 200, 0), (100, 50, 200))
    assert spans(m) == [(0, 100, 0), (100, 50, 200)]
    assert m.mapped_until(T, P) == 150
    assert m.locate(T, P, 170) == Located(250, exact=False, max_duplicates=20)
    assert m.locate(T, P, 120) == exact(220)
    m.add(T, P, 150, 50, 250)  # the restarted replicator goes on: merged with its first batch
    assert spans(m) == [(0, 100, 0), (100, 100, 200)]
    assert m.locate(T, P, 170) == exact(270)


def test_restart_drops_runs_fully_covered_and_trims_the_straddling_one() -> None:
    m = omap((0, 10, 0), (20, 10, 10), (40, 10, 20), (60, 10, 30))
    m.add(T, P, 25, 5, 40)
    assert m.runs(T, P) == [Run(0, 10, 0, 0), Run(20, 5, 10, 1), Run(25, 5, 40, 4)]
    assert m.last(T, P) == Run(25, 5, 40, 4)
    assert m.locate(T, P, 22) == exact(12)
    assert m.locate(T, P, 27) == exact(42)
    assert m.locate(T, P, 45) == Located(45, exact=False, max_duplicates=15)


def test_restart_to_the_very_beginning_replaces_everything() -> None:
    m = omap((10, 90, 0), (0, 50, 90))
    assert spans(m) == [(0, 50, 90)]
    assert m.locate(T, P, 20) == exact(110)


def test_gap_uses_the_most_recent_runs() -> None:
    # Before the restart: 0..9 and 20..29 (10..19 compacted).  Restart at 5: by then 10..24
    # were compacted, so it copies 5..9 and 25..29.  A consumer at 15 must start at the newest
    # copy of 25 (down 25), not at the stale copy of 20 (down 10), which is followed by the
    # copies of 5..9 it already consumed.
    m = omap((0, 10, 0), (20, 10, 10), (5, 5, 20), (25, 5, 25))
    assert spans(m) == [(0, 5, 0), (5, 5, 20), (25, 5, 25)]
    assert m.locate(T, P, 15) == exact(25)
    assert m.locate(T, P, 12) == exact(25)
    assert m.locate(T, P, 7) == exact(22)


def test_downstream_going_back_drops_the_history() -> None:
    # The target partition was recreated: the positions the map knew no longer exist.
    m = omap((0, 100, 0), (100, 10, 5))
    assert spans(m) == [(100, 10, 5)]
    assert m.locate(T, P, 50) is None
    assert m.locate(T, P, 105) == exact(10)
    m2 = omap((0, 100, 0), (100, 10, 99))  # overlapping the previous run downstream
    assert spans(m2) == [(100, 10, 99)]


# -- the locate rules -----------------------------------------------------------------------------


def test_gap_from_compaction_translates_to_the_next_run() -> None:
    m = omap((0, 10, 0), (20, 10, 10))
    assert m.locate(T, P, 15) == exact(10)
    assert m.locate(T, P, 10) == exact(10)
    assert m.locate(T, P, 19) == exact(10)
    assert m.locate(T, P, 9) == exact(9)
    assert m.locate(T, P, 21) == exact(11)


def test_at_mapped_until_is_exact_at_the_end() -> None:
    m = omap((0, 100, 500), (100, 20, 601))
    assert m.mapped_until(T, P) == 120
    assert m.locate(T, P, 120) == exact(621)


def test_beyond_mapped_until_is_a_bound() -> None:
    m = omap((0, 100, 500))
    assert m.locate(T, P, 101) == Located(600, exact=False, max_duplicates=1)
    assert m.locate(T, P, 137) == Located(600, exact=False, max_duplicates=37)


def test_before_the_history_is_none() -> None:
    m = omap((1000, 100, 0))
    assert m.locate(T, P, 999) is None
    assert m.locate(T, P, 0) is None
    assert m.locate(T, P, 1000) == exact(0)


def test_forget_before_trims_and_keeps_answers_at_or_above() -> None:
    m = omap((0, 10, 0), (20, 10, 10), (40, 10, 20))
    before = {g: m.locate(T, P, g) for g in range(60)}
    m.forget_before(T, P, 25)
    assert m.runs(T, P) == [Run(25, 5, 15, 1), Run(40, 10, 20, 2)]
    for g in range(60):
        assert m.locate(T, P, g) == (before[g] if g >= 25 else None), g
    m.forget_before(T, P, 12)  # below what is already forgotten: no effect
    assert m.locate(T, P, 24) is None
    m.forget_before(T, P, 32)  # inside a gap: the gap up to the next run stays known
    assert m.runs(T, P) == [Run(40, 10, 20, 2)]
    assert m.locate(T, P, 31) is None
    assert m.locate(T, P, 32) == exact(20)
    assert m.locate(T, P, 45) == exact(25)


def test_forget_everything_keeps_where_replication_had_reached() -> None:
    m = omap((0, 100, 0))
    m.forget_before(T, P, 200)
    assert m.runs(T, P) == []
    assert m.mapped_until(T, P) == 100
    assert m.last(T, P) == Run(0, 100, 0, 0)
    assert m.locate(T, P, 50) is None
    assert m.locate(T, P, 100) == exact(100)
    assert m.locate(T, P, 150) == Located(100, exact=False, max_duplicates=50)
    m.add(T, P, 250, 10, 100)  # replication jumps to what the source still has (a gap)
    assert m.locate(T, P, 199) is None  # forgotten
    assert m.locate(T, P, 200) == exact(100)  # the gap from 200 up to 250
    assert m.locate(T, P, 249) == exact(100)
    assert m.locate(T, P, 255) == exact(105)


def test_restart_below_the_forgotten_part_starts_a_new_history() -> None:
    m = omap((0, 100, 0))
    m.forget_before(T, P, 50)
    m.add(T, P, 20, 10, 100)
    assert spans(m) == [(20, 10, 100)]
    assert m.locate(T, P, 19) is None
    assert m.locate(T, P, 25) == exact(105)


# -- a simulated replication -----------------------------------------------------------------------


@dataclass
class Replication:
    """A source partition, the target log and the offset map the replicator publishes.

    ``target`` holds, per target offset, the source offset copied there (None: a record not
    copied from this partition, e.g. a transaction marker).  The replicator copies the existing
    source records from ``position`` on, in batches; a restart moves ``position`` back.
    """

    source: list[int]  # existing source offsets (the rest was compacted away)
    position: int
    target: list[int | None] = field(default_factory=list)
    offset_map: OffsetMap = field(default_factory=OffsetMap)
    history_start: int | None = None  # the lowest position a batch was copied from

    def batch(self, size: int, marker: bool, restart_at: int | None = None) -> None:
        if restart_at is not None:
            assert restart_at <= self.position
            self.position = restart_at
        records = [o for o in self.source if o >= self.position][:size]
        if not records:
            return
        if self.history_start is None or self.position < self.history_start:
            self.history_start = self.position
        runs: list[list[int]] = []
        for offset in records:
            if runs and runs[-1][-1] == offset - 1:
                runs[-1].append(offset)
            else:
                runs.append([offset])
        record = OffsetMapRecord(topic=T, partition=P)
        for run in runs:
            record.runs.append(OffsetRun(upstream_start=run[0], count=len(run),
                                         downstream_start=len(self.target)))
            self.target.extend(run)
        if marker:
            self.target.append(None)
        self.position = records[-1] + 1
        self.offset_map.add_record(record)

    def check(self, g: int, located: Located) -> int:
        """Assert nothing is skipped and the duplicates are within the answer; return them.

        The target is the current log followed by the records the replicator copies next.
        """
        future = [o for o in self.source if o >= self.position]
        log = self.target + future
        assert 0 <= located.downstream <= len(self.target)
        after = [o for o in log[located.downstream:] if o is not None]
        missing = {o for o in self.source if o >= g} - set(after)
        assert not missing, f"g={g}: skipped {sorted(missing)}"
        duplicates = sum(1 for o in after if o < g)
        if located.exact:
            assert duplicates == 0, f"g={g}: exact answer but {duplicates} duplicates"
            assert located.max_duplicates == 0
        else:
            assert duplicates <= located.max_duplicates, f"g={g}: {duplicates} duplicates"
        return duplicates


def test_the_simulator_rejects_wrong_answers() -> None:
    sim = Replication(source=list(range(300)), position=0)
    sim.batch(200, marker=False)
    sim.batch(200, marker=False, restart_at=100)
    assert sim.offset_map.locate(T, P, 150) == exact(250)
    assert sim.check(150, exact(250)) == 0
    with pytest.raises(AssertionError, match="duplicates"):
        sim.check(150, exact(150))  # A's copy: B's copies of 100..149 follow
    with pytest.raises(AssertionError, match="skipped"):
        sim.check(150, exact(251))
    with pytest.raises(AssertionError, match="duplicates"):
        sim.check(150, Located(249, exact=False, max_duplicates=0))


@st.composite
def replications(draw: st.DrawFn) -> tuple[Replication, int]:
    end = draw(st.integers(1, 60))
    kept = draw(st.lists(st.integers(0, 5), min_size=end, max_size=end))
    source = [o for o, k in enumerate(kept) if k]  # about 1 in 6 compacted away
    sim = Replication(source=source, position=draw(st.integers(0, end)))
    steps = draw(st.lists(
        st.tuples(st.integers(1, 8), st.booleans(), st.integers(0, 9), st.integers(0, 1000)),
        min_size=1, max_size=30,
    ))
    for size, marker, restart, fraction in steps:
        restart_at = sim.position * fraction // 1000 if restart == 0 else None
        sim.batch(size, marker, restart_at)
    return sim, end


@settings(max_examples=400, deadline=None)
@given(replications())
def test_locate_never_skips_and_exact_means_no_duplicates(case: tuple[Replication, int]) -> None:
    sim, end = case
    m = sim.offset_map
    for g in range(end + 1):
        located = m.locate(T, P, g)
        if sim.history_start is None:
            assert located is None
            continue
        first = m.runs(T, P)[0].upstream_start
        # The history starts at the first record copied from the lowest batch start.
        assert first == min(o for o in sim.source if o >= sim.history_start)
        if g < first:
            assert located is None
            continue
        assert located is not None
        sim.check(g, located)
        mapped_until = m.mapped_until(T, P)
        assert mapped_until is not None
        assert located.exact == (g <= mapped_until)
    # The retained runs never overlap and are sorted upstream and downstream alike.
    runs = m.runs(T, P)
    for a, b in pairwise(runs):
        assert a.upstream_end <= b.upstream_start
        assert a.downstream_end <= b.downstream_start
        assert a.seq < b.seq


@settings(max_examples=200, deadline=None)
@given(replications(), st.integers(0, 70))
def test_forget_before_changes_nothing_at_or_above(
    case: tuple[Replication, int], cut: int
) -> None:
    sim, end = case
    m = sim.offset_map
    before = [m.locate(T, P, g) for g in range(end + 1)]
    mapped_until = m.mapped_until(T, P)
    m.forget_before(T, P, cut)
    assert m.mapped_until(T, P) == mapped_until
    for g in range(end + 1):
        # At or beyond mapped_until the answer does not depend on the history.
        kept = g >= cut or (mapped_until is not None and g >= mapped_until)
        assert m.locate(T, P, g) == (before[g] if kept else None)


def test_lagging_group_far_behind_a_long_replication() -> None:
    # testOffsetTranslationBehindReplicationFlow with a dense map: 10 000 records in batches
    # of 100, each followed by a commit marker; the group first commits the record at 90 %,
    # then rewinds to 10 %.
    sim = Replication(source=list(range(10_000)), position=0)
    for _ in range(100):
        sim.batch(100, marker=True)
    m = sim.offset_map
    assert len(m.runs(T, P)) == 100
    at_90 = m.locate(T, P, 9000)
    at_10 = m.locate(T, P, 1000)
    assert at_90 == exact(9000 + 90) and sim.target[9090] == 9000
    assert at_10 == exact(1000 + 10) and sim.target[1010] == 1000
    assert at_10.downstream < at_90.downstream
    sim.check(9000, at_90)
    sim.check(1000, at_10)


def test_an_empty_run_before_any_history_makes_a_leading_gap_exact() -> None:
    """A compacted topic's first records are gone: the replicator started fetching at 0 and
    the first record it copied was 4. Groups at 0..3 resume at the first mirrored record."""
    m = OffsetMap()
    m.add(T, P, 0, 0, 0)
    m.add(T, P, 4, 1, 0)
    m.add(T, P, 9, 1, 1)
    assert [m.locate(T, P, g) for g in (0, 3, 4, 5, 9, 10)] == [
        Located(0, True, 0), Located(0, True, 0), Located(0, True, 0), Located(1, True, 0),
        Located(1, True, 0), Located(2, True, 0)]


def test_an_empty_run_after_history_changes_nothing() -> None:
    m = omap((10, 5, 0))
    m.add(T, P, 2, 0, 5)
    assert m.locate(T, P, 9) is None
    assert m.runs(T, P) == [Run(10, 5, 0, 0)]
