"""MM2's OffsetSyncStore, pinned to worked examples of its history."""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirrorline.core import offset_sync_store as oss
from mirrorline.core.offset_sync_store import SLOTS, OffsetSyncStore
from mirrorline.core.wire import OffsetSync

TP = ("topic1", 2)
I64_MAX = 2**63 - 1


def sync(up: int, down: int) -> OffsetSync:
    return OffsetSync(TP[0], TP[1], up, down)


def started(
    must_read_to_end: bool = True, initial: Iterable[tuple[int, int]] = ()
) -> OffsetSyncStore:
    store = OffsetSyncStore()
    store.start_initial_read(must_read_to_end)
    for up, down in initial:
        store.add(sync(up, down))
    store.finish_initial_read()
    return store


def translate(store: OffsetSyncStore, offset: int) -> int | None:
    return store.translate_downstream(TP[0], TP[1], offset)


def retained_upstream(store: OffsetSyncStore) -> list[int]:
    return [s.upstream_offset for s in store.retained(*TP)]


def assert_sparse_invariants(store: OffsetSyncStore) -> None:
    """Invariants B and C hold between every pair of slots holding different offsets."""
    slots = store.slots(*TP)
    assert slots is not None
    for j in range(SLOTS):
        for i in range(j):
            up_i, up_j = slots[i].upstream_offset, slots[j].upstream_offset
            if up_i == up_j:
                continue
            b_bound = up_j + 2**j - 2**i
            if b_bound <= I64_MAX:
                assert up_i <= b_bound, (i, j, up_i, up_j)
            c_bound = up_j + 2 ** max(i - 2, 0)
            if c_bound <= I64_MAX:
                assert up_i >= c_bound, (i, j, up_i, up_j)


# -- basic translation --------------------------------------------------------------------------


def test_translation_basics() -> None:
    store = started()
    store.add(sync(100, 200))
    assert translate(store, 150) == 201
    store.add(sync(150, 251))
    assert translate(store, 150) == 251
    assert translate(store, 5) == -1
    store.add(sync(200, 10))  # downstream reset
    assert translate(store, 200) == 10
    store.add(sync(20, 20))  # upstream rewind
    assert translate(store, 20) == 20


def test_no_translation_before_the_initial_read_finished() -> None:
    store = OffsetSyncStore()
    store.start_initial_read(True)
    store.add(sync(100, 200))
    assert not store.is_ready
    for offset in (0, 100, 200):
        assert translate(store, offset) is None
    store.finish_initial_read()
    assert store.is_ready
    assert translate(store, 0) == -1
    assert translate(store, 100) == 200
    assert translate(store, 200) == 201


def test_no_sync_for_partition_is_none() -> None:
    store = started(initial=[(100, 200)])
    assert store.translate_downstream(TP[0], TP[1] + 1, 100) is None
    assert store.translate_downstream("other", TP[1], 100) is None
    assert store.retained("other", 0) == []
    assert store.slots("other", 0) is None


def test_syncs_before_start_keep_only_the_latest() -> None:
    # Adding before start_initial_read behaves like a read that must reach the end.
    store = OffsetSyncStore()
    store.add(sync(10, 10))
    store.add(sync(20, 20))
    store.start_initial_read(False)
    store.finish_initial_read()
    assert retained_upstream(store) == [20]


def test_identity_not_value_decides_duplicates() -> None:
    # Two equal-valued syncs are two history entries; a value-comparing store would treat the
    # second as already present in every slot and keep one entry.
    store = started(must_read_to_end=False)
    first = sync(0, 0)
    store.add(first)
    second = sync(0, 0)
    store.add(second)
    slots = store.slots(*TP)
    assert slots is not None
    assert slots[0] is second
    assert slots[SLOTS - 1] is first
    assert len(store.retained(*TP)) == 2


def test_copy_on_write() -> None:
    store = started(must_read_to_end=False, initial=[(0, 0), (10, 10)])
    before = store.slots(*TP)
    internal = store._syncs[TP]  # the published list a concurrent reader may hold
    snapshot = list(internal)
    store.add(sync(20, 20))
    assert internal == snapshot and all(a is b for a, b in zip(internal, snapshot, strict=True))
    assert store._syncs[TP] is not internal
    assert before is not None and before[0].upstream_offset == 10


def test_equal_valued_syncs_are_not_far_apart() -> None:
    # Two distinct syncs at upstream 11 violate invariant C (11 < 11 + 1), so only the later
    # one survives and 8 is kept; treating equal values as "the same sync" would keep both 11s
    # and evict 8 instead.
    store = OffsetSyncStore()
    store.start_initial_read(False)
    syncs = [sync(up, up) for up in (0, 8, 11, 11, 14)]
    for s in syncs:
        store.add(s)
    store.finish_initial_read()
    retained = store.retained(*TP)
    assert [s.upstream_offset for s in retained] == [14, 11, 8, 0]
    assert retained[1] is syncs[3]
    assert translate(store, 9) == 9
    assert translate(store, 10) == 9


def test_old_sync_too_close_to_the_next_slot_is_dropped() -> None:
    # 5 would be the best sync for offsets 5..34, but wherever it could sit it is too close to
    # the older 0 in the next slot (invariant C), so the repair replaces it.
    store = started(must_read_to_end=False, initial=[(0, 0), (5, 5), (35, 35)])
    assert retained_upstream(store) == [35, 0]
    assert translate(store, 6) == 1


# -- history folding during the initial read (OffsetSyncStore.updateSyncArray) ---------------------


def assert_pairs(store: OffsetSyncStore, pairs: list[tuple[int, int]]) -> None:
    for x, y in pairs:
        assert translate(store, x - 1) == (-1 if y == -1 else y + 1), (x, y)
        assert translate(store, x) == x, (x, y)
        assert translate(store, x + 1) == x + 1, (x, y)
        assert translate(store, x + 2) == x + 1, (x, y)


def _past_offsets(must_read_to_end: bool) -> OffsetSyncStore:
    """Syncs o -> o for o = 0, 10, ..., 1000 read during the initial read."""
    store = OffsetSyncStore()
    store.start_initial_read(must_read_to_end)
    for offset in range(0, 1001, 10):
        store.add(sync(offset, offset))
        assert_sparse_invariants(store)
    store.finish_initial_read()
    return store


def test_past_offsets_must_read_to_end() -> None:
    store = _past_offsets(True)
    assert retained_upstream(store) == [1000]
    assert_pairs(store, [(1000, -1)])
    for offset in range(1010, 10001, 10):
        store.add(sync(offset, offset))
        assert_sparse_invariants(store)
    assert_pairs(store, [(1000, -1), (4840, 1000), (6760, 4840), (8680, 6760), (9160, 8680),
                         (9640, 9160), (9880, 9640), (9940, 9880), (9970, 9940), (9990, 9970),
                         (10000, 9990)])
    store.add(sync(1500, 11000))  # upstream rewind
    assert translate(store, 1499) == -1
    assert translate(store, 1500) == 11000
    assert translate(store, 2000) == 11001


def test_past_offsets_full_history() -> None:
    store = _past_offsets(False)
    assert_pairs(store, [(480, 0), (720, 480), (1000, 990)])
    for offset in range(1010, 10001, 10):
        store.add(sync(offset, offset))
        assert_sparse_invariants(store)
    assert_pairs(store, [(3840, 0), (7680, 3840), (8640, 7680), (9120, 8640), (9600, 9120),
                         (9840, 9600), (9900, 9840), (9960, 9900), (9990, 9960), (10000, 9990)])
    store.add(sync(1500, 11000))
    assert translate(store, 1499) == -1
    assert translate(store, 1500) == 11000
    assert translate(store, 2000) == 11001


def test_eviction_of_275() -> None:
    store = started(must_read_to_end=False, initial=[(o, o) for o in (175, 275, 375, 475)])
    assert retained_upstream(store) == [475, 375, 175]
    assert translate(store, 250) == 176
    assert translate(store, 370) == 176
    assert translate(store, 400) == 376


def test_translation_of_fixed_offset_can_move_backwards() -> None:
    store = started()
    store.add(sync(11, 4))
    store.add(sync(12, 5))
    assert translate(store, 13) == 6
    for up in range(13, 18):
        store.add(sync(up, up - 7))
    assert retained_upstream(store) == [17, 16, 15, 11]
    assert translate(store, 13) == 5
    assert translate(store, 12) == 5


# -- 64-bit predicates --------------------------------------------------------------------------


def test_predicates_treat_overflowing_bounds_like_java() -> None:
    head = sync(I64_MAX, 0)
    old = sync(2**62, 0)
    # B: 2**62 + 2**63 - 2**62 overflows a long -> satisfied, whatever the newer offset.
    assert oss._ok_b(head, old, 62, 63)
    # C: 2**62 + 2**60 does not overflow; I64_MAX is far enough from it.
    assert oss._ok_c(head, old, 62)
    near_max = sync(I64_MAX - 1, 0)
    # C: (I64_MAX - 1) + 2**3 overflows -> violated even though Python ints would not wrap.
    assert not oss._ok_c(head, near_max, 5)
    # Identity short-circuits both.
    assert oss._ok_b(head, head, 0, 63) and oss._ok_c(head, head, 63)


def test_bound_violations() -> None:
    a, b = sync(100, 0), sync(97, 0)
    assert not oss._ok_b(a, b, 0, 1)  # 100 > 97 + 2 - 1
    assert oss._ok_b(sync(98, 0), b, 0, 1)
    assert not oss._ok_c(sync(97, 0), b, 0)  # equal offsets in distinct objects are too close
    assert oss._ok_c(sync(98, 0), b, 0)
    assert not oss._ok_c(sync(0, 0), sync(-1, 0), 3)  # a negative bound counts as violated


# -- eviction properties with OffsetSyncStore's invariants A and D ---------------------------------


def _bounded_expirations(first: int, steps: Iterable[int], maximum: int) -> None:
    store = started(must_read_to_end=True)
    store.add(sync(first, first))
    offset = first
    last_count = 1
    for step in steps:
        offset += step
        if offset > I64_MAX:
            return  # Java would overflow here; the stream is over
        store.add(sync(offset, offset))
        slots = store.slots(*TP)
        assert slots is not None
        assert slots[0].upstream_offset == offset  # invariant A
        assert slots[SLOTS - 1].upstream_offset == first  # invariant D
        count = len(store.retained(*TP))
        expired = last_count - count + 1
        assert expired <= maximum, (offset, expired)
        last_count = count


def _java_steps() -> Iterator[int]:
    step = 1
    while step < I64_MAX // 100:
        yield step
        step = step * 2 + 1


@pytest.mark.parametrize("step", list(_java_steps()))
def test_consistently_spaced_syncs_expire_at_most_one(step: int) -> None:
    for first in (0, 1, 13, 29):
        _bounded_expirations(first, [step] * 100, 1)


# Beyond a span of 2**62 offsets invariant B between slots 62 and 63 forces the first sync out,
# so D cannot hold there (Java behaves the same; its own grid above stays below that span).
@settings(max_examples=40, deadline=None)
@given(step=st.integers(1, (2**62 - 30) // 100), first=st.integers(0, 29))
def test_consistently_spaced_syncs_any_step(step: int, first: int) -> None:
    _bounded_expirations(first, [step] * 100, 1)


def test_first_sync_is_evicted_once_history_spans_more_than_2_62() -> None:
    # Slot 62 may be at most 2**63 - 2**62 past slot 63 (invariant B): when the head reaches
    # slot 62 that far out, the oldest sync has to go.
    store = started()
    for up in (0, 2**61 + 1):
        store.add(sync(up, up))
    slots = store.slots(*TP)
    assert slots is not None and slots[SLOTS - 1].upstream_offset == 0
    store.add(sync(2**62 + 2, 2**62 + 2))
    assert retained_upstream(store) == [2**62 + 2, 2**61 + 1]


@pytest.mark.parametrize("bits", range(1, 54))
def test_randomly_spaced_syncs(bits: int) -> None:
    rng = random.Random(bits)
    iterations = 1 << 8
    spread = 1 << bits
    _bounded_expirations(0, [rng.randrange(0, spread) for _ in range(iterations)], bits + 2)
    lag = 1 << 16
    _bounded_expirations(0, [rng.randrange(lag, lag + spread) for _ in range(iterations)],
                         bits + 2)


def test_dropped_syncs_spacing() -> None:
    rng = random.Random(0)
    steps = [(2 if rng.random() < 0.5 else 1) * 100 for _ in range(10000)]
    _bounded_expirations(0, steps, 2)
