"""Offset-sync emission decisions (MM2's OffsetSyncWriter)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirrorline.core import offset_syncs as offset_syncs_module
from mirrorline.core.offset_syncs import OffsetSyncPlanner, PartitionSyncState
from mirrorline.core.wire import OffsetSync

# -- PartitionSyncState.update: the pinned sequence ------------------------------------------


def test_update_sequence_lag_50() -> None:
    state = PartitionSyncState(50)

    def step(up: int, down: int, *, reset: bool = True) -> bool:
        result = state.update(up, down)
        if reset:
            state.reset()
        return result

    assert step(0, 100) is True  # first record
    assert step(2, 102) is True  # upstream gap
    assert step(3, 152) is False
    assert step(4, 153) is True  # 153 - (102 + 1) = 50
    assert step(5, 154) is False
    assert step(6, 203) is False
    assert step(7, 204) is True
    assert step(2, 206) is True  # upstream rewind
    assert step(3, 207) is False
    assert step(4, 3) is True  # downstream rewind
    assert step(5, 4, reset=False) is False
    # Without reset the answer is sticky once a condition fired.
    assert step(7, 6, reset=False) is True
    assert step(7, 6, reset=False) is True
    assert step(8, 7, reset=False) is True
    assert step(10, 57, reset=False) is True
    state.reset()
    assert step(11, 58) is False


def test_update_lag_0_always_syncs() -> None:
    state = PartitionSyncState(0)
    for up, down in [(0, 100), (2, 102), (3, 152), (4, 153), (5, 154), (6, 203), (7, 204),
                     (2, 206), (3, 207), (4, 3), (5, 4), (6, 5), (7, 6)]:
        assert state.update(up, down) is True
        state.reset()


def test_update_tracks_last_sync() -> None:
    state = PartitionSyncState(10)
    assert state.snapshot() == (-1, -1, -1, False)
    state.update(5, 50)
    assert state.snapshot() == (5, 50, 50, True)
    state.reset()
    state.update(6, 51)
    assert state.snapshot() == (6, 51, 50, False)


# -- OffsetSyncPlanner: the pinned writer tests -----------------------------------------------


def test_writer_lag_2_first_pending_then_delayed() -> None:
    planner = OffsetSyncPlanner(2)
    planner.queue("topic", 0, 0, 1)
    assert planner.pending_syncs() == [OffsetSync("topic", 0, 0, 1)]
    assert planner.delayed_count == 0
    assert planner.state_snapshot("topic", 0) == (0, 1, 1, False)
    planner.queue("topic", 0, 1, 2)
    assert planner.pending_syncs() == [OffsetSync("topic", 0, 0, 1)]
    assert planner.delayed_syncs() == [OffsetSync("topic", 0, 1, 2)]
    assert planner.state_snapshot("topic", 0) == (1, 2, 1, False)  # lastSyncDownstream stays 1


def test_writer_lag_50_promote_appends_after_the_due_sync() -> None:
    planner = OffsetSyncPlanner(50)
    planner.queue("topic", 0, 0, 100)
    planner.queue("topic", 0, 1, 101)
    assert planner.pending_syncs() == [OffsetSync("topic", 0, 0, 100)]
    assert planner.delayed_syncs() == [OffsetSync("topic", 0, 1, 101)]
    planner.promote_delayed()
    # MM2's map would now hold only (1, 101); the outbox keeps both, in order.
    assert planner.pending_syncs() == [
        OffsetSync("topic", 0, 0, 100),
        OffsetSync("topic", 0, 1, 101),
    ]
    assert planner.pending_count == 2
    assert planner.delayed_count == 0
    planner.promote_delayed()  # nothing delayed any more: no-op
    assert planner.pending_count == 2


def test_take_pending_respects_permits() -> None:
    # The adapter passes its free in-flight permits as the limit; with none free nothing is
    # taken, and the sync is taken once a permit is returned.
    planner = OffsetSyncPlanner(0)
    planner.queue("a", 0, 0, 0)
    assert planner.take_pending(1) == [OffsetSync("a", 0, 0, 0)]
    planner.queue("a", 0, 1, 1)
    assert planner.take_pending(0) == []
    assert planner.take_pending(-1) == []
    assert planner.pending_count == 1
    assert planner.take_pending(1) == [OffsetSync("a", 0, 1, 1)]
    assert planner.pending_count == 0


def test_take_pending_fifo_and_due_syncs_never_replaced() -> None:
    planner = OffsetSyncPlanner(0)
    planner.queue("a", 0, 0, 0)
    planner.queue("b", 0, 0, 0)
    planner.queue("c", 0, 0, 0)
    planner.queue("a", 0, 1, 1)  # a second entry for a, at the back
    assert planner.take_pending(2) == [OffsetSync("a", 0, 0, 0), OffsetSync("b", 0, 0, 0)]
    assert planner.take_pending(10) == [OffsetSync("c", 0, 0, 0), OffsetSync("a", 0, 1, 1)]
    assert planner.take_pending(10) == []


def test_immediate_sync_removes_delayed_entry() -> None:
    planner = OffsetSyncPlanner(50)
    planner.queue("a", 0, 0, 100)
    planner.take_pending(10)
    planner.queue("a", 0, 1, 101)
    assert planner.delayed_count == 1
    planner.queue("a", 0, 5, 102)  # gap: immediate
    assert planner.delayed_count == 0
    assert planner.pending_syncs() == [OffsetSync("a", 0, 5, 102)]


def test_promote_appends_delayed_in_map_order_after_the_outbox() -> None:
    planner = OffsetSyncPlanner(50)
    planner.queue("a", 0, 0, 0)
    planner.queue("b", 0, 0, 0)
    planner.queue("b", 0, 1, 1)  # delayed first
    planner.take_pending(1)  # a's first sync goes out
    planner.queue("a", 0, 1, 1)  # delayed second
    planner.queue("b", 0, 2, 2)  # replaces b's delayed entry in place
    assert planner.delayed_syncs() == [OffsetSync("b", 0, 2, 2), OffsetSync("a", 0, 1, 1)]
    planner.promote_delayed()
    assert planner.pending_syncs() == [
        OffsetSync("b", 0, 0, 0),
        OffsetSync("b", 0, 2, 2),
        OffsetSync("a", 0, 1, 1),
    ]
    assert planner.delayed_count == 0


def test_forget_drops_state_and_every_queued_sync() -> None:
    planner = OffsetSyncPlanner(0)
    planner.queue("a", 0, 0, 100)
    planner.queue("b", 0, 0, 100)
    planner.queue("a", 0, 1, 101)
    planner.queue("a", 1, 0, 100)  # another partition of the same topic survives
    planner.queue("a", 0, 2, 102)
    planner.forget("a", 0)
    assert planner.state_snapshot("a", 0) is None
    assert planner.pending_syncs() == [OffsetSync("b", 0, 0, 100), OffsetSync("a", 1, 0, 100)]
    # A fresh lifetime: the next record syncs immediately again.
    planner.queue("a", 0, 3, 103)
    assert planner.pending_syncs()[-1] == OffsetSync("a", 0, 3, 103)
    planner.forget("never-seen", 3)  # harmless
    assert planner.pending_count == 3


def test_forget_drops_delayed_entry() -> None:
    planner = OffsetSyncPlanner(50)
    planner.queue("a", 0, 0, 100)
    planner.queue("a", 0, 1, 101)
    planner.queue("b", 0, 0, 100)
    planner.queue("b", 0, 1, 101)
    planner.forget("a", 0)
    assert planner.pending_syncs() == [OffsetSync("b", 0, 0, 100)]
    assert planner.delayed_syncs() == [OffsetSync("b", 0, 1, 101)]


# -- the outbox bound -------------------------------------------------------------------------


def test_outbox_overflow_compacts_to_latest_per_partition_keeping_order() -> None:
    planner = OffsetSyncPlanner(0, max_outbox=3)
    assert planner.max_outbox == 3
    planner.queue("a", 0, 0, 0)
    planner.queue("b", 0, 0, 0)
    planner.queue("a", 0, 1, 1)
    assert planner.pending_count == 3  # at the bound, not beyond it: untouched
    planner.queue("c", 0, 0, 0)  # 4 > 3: collapse; a's survivor sits where a's latest stood
    assert planner.pending_syncs() == [
        OffsetSync("b", 0, 0, 0),
        OffsetSync("a", 0, 1, 1),
        OffsetSync("c", 0, 0, 0),
    ]
    planner.queue("b", 0, 1, 1)  # 4 > 3 again: b moves behind a and c
    assert planner.pending_syncs() == [
        OffsetSync("a", 0, 1, 1),
        OffsetSync("c", 0, 0, 0),
        OffsetSync("b", 0, 1, 1),
    ]


def test_outbox_overflow_during_a_batch_matches_per_record() -> None:
    # Appending t0..t9 one by one with the bound 4 collapses whenever a fifth entry arrives:
    # [x y t0 t1] +t2 -> [x y t2], +t3, +t4 -> [x y t4], +t5, +t6 -> [x y t6], ..., +t9.
    expected = [
        OffsetSync("x", 0, 0, 0),
        OffsetSync("y", 0, 0, 0),
        OffsetSync("t", 0, 18, 8),
        OffsetSync("t", 0, 19, 9),
    ]
    for batch in (True, False):
        planner = OffsetSyncPlanner(0, max_outbox=4)
        planner.queue("x", 0, 0, 0)
        planner.queue("y", 0, 0, 0)
        if batch:
            planner.queue_batch("t", 0, range(10, 20), 0)
        else:
            _per_record(planner, "t", 0, list(range(10, 20)), 0)
        assert planner.pending_syncs() == expected


def test_outbox_overflow_during_promote() -> None:
    planner = OffsetSyncPlanner(50, max_outbox=2)
    planner.queue("a", 0, 0, 0)
    planner.queue("b", 0, 0, 0)
    planner.queue("a", 0, 1, 1)
    planner.queue("b", 0, 1, 1)
    planner.promote_delayed()  # +a1 -> [b0 a1], +b1 -> [a1 b1]
    assert planner.pending_syncs() == [OffsetSync("a", 0, 1, 1), OffsetSync("b", 0, 1, 1)]
    assert planner.delayed_count == 0


def test_outbox_bound_holds_for_a_huge_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    # lag 0 asks for a sync per record; a billion of them must not be materialised.  Appended one
    # by one with the bound 5, the outbox collapses after appends 6, 11, 16, ... (to 1 entry), the
    # last time after append 999_999_996, and then receives four more.
    built = 0

    def counting_sync(*args: Any) -> OffsetSync:
        nonlocal built
        built += 1
        if built > 100:  # fail fast instead of exhausting memory
            raise AssertionError("the batch's syncs are being built one per record")
        return OffsetSync(*args)

    monkeypatch.setattr(offset_syncs_module, "OffsetSync", counting_sync)
    planner = OffsetSyncPlanner(0, max_outbox=5)
    size = 1_000_000_000
    planner.queue_batch("t", 0, range(size), 0)
    assert planner.pending_syncs() == [
        OffsetSync("t", 0, i, i) for i in range(999_999_995, size)
    ]
    assert planner.delayed_count == 0
    assert planner.state_snapshot("t", 0) == (size - 1, size - 1, size - 1, False)


def test_outbox_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_outbox"):
        OffsetSyncPlanner(100, max_outbox=0)


# -- queue_batch ------------------------------------------------------------------------------


def test_queue_batch_consecutive_run() -> None:
    planner = OffsetSyncPlanner(10)
    planner.queue_batch("t", 0, list(range(100, 130)), 1000)
    # Syncs due at downstream 1000, 1011, 1022, all published; 1029 delayed.
    assert planner.pending_syncs() == [
        OffsetSync("t", 0, 100, 1000),
        OffsetSync("t", 0, 111, 1011),
        OffsetSync("t", 0, 122, 1022),
    ]
    assert planner.delayed_syncs() == [OffsetSync("t", 0, 129, 1029)]
    assert planner.state_snapshot("t", 0) == (129, 1029, 1022, False)


def test_queue_batch_ending_on_a_sync_leaves_nothing_delayed() -> None:
    planner = OffsetSyncPlanner(10)
    planner.queue_batch("t", 0, range(0, 23), 0)
    assert planner.pending_syncs() == [
        OffsetSync("t", 0, 0, 0),
        OffsetSync("t", 0, 11, 11),
        OffsetSync("t", 0, 22, 22),
    ]
    assert planner.delayed_count == 0


def test_queue_batch_publishes_a_sync_every_lag_plus_one_records() -> None:
    planner = OffsetSyncPlanner(100)
    base = 7_000
    planner.queue_batch("t", 0, list(range(40_000, 45_000)), base)
    expected = [OffsetSync("t", 0, 40_000 + i, base + i) for i in range(0, 5_000, 101)]
    assert len(expected) == 50
    assert expected[-1].downstream_offset == base + 4_949
    assert planner.pending_syncs() == expected
    assert planner.delayed_syncs() == [OffsetSync("t", 0, 44_999, base + 4_999)]
    assert planner.state_snapshot("t", 0) == (44_999, base + 4_999, base + 4_949, False)

    # The next batch continues the cadence from the last sync, not from the batch boundary.
    planner.queue_batch("t", 0, range(45_000, 45_200), base + 5_000)
    assert planner.pending_syncs()[50:] == [
        OffsetSync("t", 0, 45_050, base + 5_050),
        OffsetSync("t", 0, 45_151, base + 5_151),
    ]
    assert planner.delayed_syncs() == [OffsetSync("t", 0, 45_199, base + 5_199)]

    # The sender drains everything in order, ten permits at a time.
    drained: list[OffsetSync] = []
    while chunk := planner.take_pending(10):
        assert len(chunk) <= 10
        drained += chunk
    assert [s.downstream_offset for s in drained] == [
        *range(base, base + 5_000, 101), base + 5_050, base + 5_151
    ]
    assert planner.pending_count == 0


def test_queue_batch_with_gaps() -> None:
    planner = OffsetSyncPlanner(10)
    # Two runs: upstream 0..24 at downstream 500..524, then (gap) 30..44 at 525..539.
    planner.queue_batch("t", 0, [*range(0, 25), *range(30, 45)], 500)
    assert planner.pending_syncs() == [
        OffsetSync("t", 0, 0, 500),  # first record
        OffsetSync("t", 0, 11, 511),  # lag
        OffsetSync("t", 0, 22, 522),  # lag
        OffsetSync("t", 0, 30, 525),  # upstream gap
        OffsetSync("t", 0, 41, 536),  # lag, counted from the gap's sync
    ]
    assert planner.delayed_syncs() == [OffsetSync("t", 0, 44, 539)]


def test_queue_batch_with_rewind_and_repeat() -> None:
    planner = OffsetSyncPlanner(50)
    planner.queue_batch("t", 0, [5, 6, 7, 3, 4, 4, 5], 0)
    assert planner.pending_syncs() == [
        OffsetSync("t", 0, 5, 0),
        OffsetSync("t", 0, 3, 3),  # rewind
        OffsetSync("t", 0, 4, 5),  # repeat
    ]
    assert planner.delayed_syncs() == [OffsetSync("t", 0, 5, 6)]


def test_queue_batch_lag_sync_at_downstream_minus_one_rearms_first_sync() -> None:
    # lastSyncDownstream == -1 means "never synced", so a lag sync that lands on downstream -1
    # makes the very next record sync too, in the middle of a run.
    planner = OffsetSyncPlanner(1)
    planner.queue_batch("t", 0, [1, 2, 3, 4, 5], -3)
    assert planner.pending_syncs() == [
        OffsetSync("t", 0, 1, -3),  # first record
        OffsetSync("t", 0, 3, -1),  # lag
        OffsetSync("t", 0, 4, 0),  # "first" again
    ]
    assert planner.delayed_syncs() == [OffsetSync("t", 0, 5, 1)]


def test_queue_batch_does_not_walk_records_of_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    planner = OffsetSyncPlanner(0)
    calls: list[tuple[Any, ...]] = []
    original = planner.queue

    def spy(*args: Any) -> None:
        calls.append(args)
        original(*args)

    monkeypatch.setattr(planner, "queue", spy)
    planner.queue_batch("t", 0, list(range(5000, 15000)), 0)
    assert len(calls) == 1  # only the run's first record goes through the per-record path
    assert planner.pending_syncs() == [OffsetSync("t", 0, 5000 + i, i) for i in range(10_000)]

    calls.clear()
    offsets = [*range(0, 10), *range(20, 30), 25, *range(26, 40)]
    planner.queue_batch("u", 0, offsets, 0)
    assert len(calls) == 3  # one per run


@pytest.mark.parametrize("max_outbox", [100_000, 4])
@pytest.mark.parametrize("container", [list, tuple])
@pytest.mark.parametrize(
    "offsets",
    [
        range(10, 40),  # gap-free
        range(10, 70, 2),  # all gaps
        range(40, 10, -1),  # rewinds
        [*range(0, 25), *range(30, 37)],
        [10, 12, 12, 13],  # last - first == len - 1, yet not gap-free
        [0, 1, 3, 2, 4],
        [5, 6, 8, 7, 8, 9, 10, 10, 11],
    ],
)
def test_queue_batch_containers(
    container: Callable[[Iterable[int]], Sequence[int]], offsets: Sequence[int], max_outbox: int
) -> None:
    for given_offsets in (container(offsets), offsets):
        fast = OffsetSyncPlanner(3, max_outbox=max_outbox)
        slow = OffsetSyncPlanner(3, max_outbox=max_outbox)
        reference = _Reference(3, max_outbox)
        fast.queue_batch("t", 0, given_offsets, 7)
        _per_record(slow, "t", 0, list(offsets), 7)
        _per_record(reference, "t", 0, list(offsets), 7)
        assert _observe(fast, [("t", 0)]) == _observe(slow, [("t", 0)])
        assert _observe(slow, [("t", 0)]) == reference.observe([("t", 0)])


class _Reference:
    """An independent, literal model: MM2's writer firing after every record with permits to
    spare, so each due sync is published; the outbox collapses to the latest sync per partition
    whenever an append takes it past ``max_outbox``."""

    def __init__(self, lag: int, max_outbox: int) -> None:
        self.lag = lag
        self.max_outbox = max_outbox
        self.states: dict[tuple[str, int], PartitionSyncState] = {}
        self.outbox: list[OffsetSync] = []
        self.delayed: dict[tuple[str, int], OffsetSync] = {}

    def queue(self, topic: str, partition: int, upstream: int, downstream: int) -> None:
        key = (topic, partition)
        state = self.states.setdefault(key, PartitionSyncState(self.lag))
        sync = OffsetSync(topic, partition, upstream, downstream)
        if state.update(upstream, downstream):
            self.delayed.pop(key, None)
            self._append(sync)
            state.reset()
        else:
            self.delayed[key] = sync

    def _append(self, sync: OffsetSync) -> None:
        self.outbox.append(sync)
        if len(self.outbox) > self.max_outbox:
            last_index = {s.topic_partition: i for i, s in enumerate(self.outbox)}
            self.outbox = [s for i, s in enumerate(self.outbox)
                           if last_index[s.topic_partition] == i]

    def promote_delayed(self) -> None:
        for sync in list(self.delayed.values()):
            self._append(sync)
        self.delayed.clear()

    def take_pending(self, limit: int) -> list[OffsetSync]:
        taken = self.outbox[: max(limit, 0)]
        del self.outbox[: len(taken)]
        return taken

    def forget(self, topic: str, partition: int) -> None:
        key = (topic, partition)
        self.states.pop(key, None)
        self.delayed.pop(key, None)
        self.outbox = [s for s in self.outbox if s.topic_partition != key]

    def observe(self, keys: list[tuple[str, int]]) -> object:
        return (
            list(self.outbox),
            list(self.delayed.values()),
            [None if (s := self.states.get(k)) is None else s.snapshot() for k in keys],
        )


def _per_record(planner: OffsetSyncPlanner | _Reference, topic: str, partition: int,
                offsets: list[int], base: int) -> None:
    for i, up in enumerate(offsets):
        planner.queue(topic, partition, up, base + i)


def _observe(planner: OffsetSyncPlanner, keys: list[tuple[str, int]]) -> object:
    return (
        planner.pending_syncs(),
        planner.delayed_syncs(),
        [planner.state_snapshot(t, p) for t, p in keys],
    )


@st.composite
def _upstream_batch(draw: st.DrawFn, start: int) -> list[int]:
    size = draw(st.integers(0, 60))
    steps = draw(
        st.lists(
            st.one_of(
                st.just(1), st.just(1), st.just(1),  # mostly consecutive
                st.integers(2, 6),  # gaps (compaction, transaction markers)
                st.integers(-8, 0),  # rewinds and repeats
            ),
            min_size=size,
            max_size=size,
        )
    )
    offsets: list[int] = []
    current = start
    for s in steps:
        current += s
        offsets.append(current)
    return offsets


_KEYS = [("t", 0), ("t", 1), ("u", 0)]

_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("batch"),
            st.integers(0, len(_KEYS) - 1),
            st.integers(-3, 40),  # upstream start
            st.one_of(st.integers(-3, 5), st.just(None)),  # None: continue downstream
        ),
        st.tuples(st.just("promote")),
        st.tuples(st.just("take"), st.integers(0, 3)),
        st.tuples(st.just("forget"), st.integers(0, len(_KEYS) - 1)),
    ),
    max_size=25,
)

# The default bound (never reached here) and bounds small enough to collapse often.
_max_outbox = st.one_of(st.just(100_000), st.integers(1, 12))


@settings(max_examples=400, deadline=None)
@given(lag=st.integers(-2, 25), max_outbox=_max_outbox, ops=_ops, data=st.data())
def test_queue_batch_equals_per_record(lag: int, max_outbox: int, ops: list[tuple[Any, ...]],
                                       data: st.DataObject) -> None:
    fast = OffsetSyncPlanner(lag, max_outbox=max_outbox)
    slow = OffsetSyncPlanner(lag, max_outbox=max_outbox)
    reference = _Reference(lag, max_outbox)
    downstream_end = {key: 0 for key in _KEYS}
    for op in ops:
        if op[0] == "batch":
            _, key_index, upstream_start, base_jump = op
            key = _KEYS[key_index]
            offsets = data.draw(_upstream_batch(upstream_start))
            # Continue the downstream log, or restart it somewhere (recreated/truncated topic).
            base = downstream_end[key] if base_jump is None else base_jump
            fast.queue_batch(key[0], key[1], offsets, base)
            _per_record(slow, key[0], key[1], offsets, base)
            _per_record(reference, key[0], key[1], offsets, base)
            downstream_end[key] = base + len(offsets)
        elif op[0] == "promote":
            fast.promote_delayed()
            slow.promote_delayed()
            reference.promote_delayed()
        elif op[0] == "take":
            taken = fast.take_pending(op[1])
            assert taken == slow.take_pending(op[1]) == reference.take_pending(op[1])
        else:
            key = _KEYS[op[1]]
            fast.forget(*key)
            slow.forget(*key)
            reference.forget(*key)
        assert _observe(fast, _KEYS) == _observe(slow, _KEYS) == reference.observe(_KEYS)
        assert fast.pending_count == len(reference.outbox)
        assert fast.delayed_count == len(reference.delayed)


@settings(max_examples=200, deadline=None)
@given(
    lag=st.integers(0, 30),
    run_length=st.integers(1, 400),
    prior=st.integers(0, 50),
    base=st.integers(0, 1000),
    max_outbox=st.one_of(st.just(100_000), st.integers(1, 40)),
    others=st.integers(0, 5),
)
def test_queue_batch_long_runs_equal_per_record(lag: int, run_length: int, prior: int,
                                                base: int, max_outbox: int, others: int) -> None:
    fast = OffsetSyncPlanner(lag, max_outbox=max_outbox)
    reference = _Reference(lag, max_outbox)
    for planner in (fast, reference):
        for other in range(others):  # other partitions' syncs sharing the outbox
            planner.queue("o", other, 0, 0)
        for i in range(prior):
            planner.queue("t", 0, i, base + i)
    offsets = list(range(prior, prior + run_length))
    fast.queue_batch("t", 0, offsets, base + prior)
    _per_record(reference, "t", 0, offsets, base + prior)
    keys = [("t", 0), *(("o", other) for other in range(others))]
    assert _observe(fast, keys) == reference.observe(keys)
