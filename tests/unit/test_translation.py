"""Offset translation: the dense offset map first, MM2's offset syncs as the fallback."""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis import given, settings
from hypothesis import strategies as st

from mirrorline.core.offset_map import OffsetMap
from mirrorline.core.offset_sync_store import OffsetSyncStore
from mirrorline.core.translation import Translation, translate, why_not
from mirrorline.core.wire import OffsetSync

T, P = "orders", 1


def store(*syncs: tuple[int, int], ready: bool = True, must_read_to_end: bool = False,
          partition: int = P) -> OffsetSyncStore:
    s = OffsetSyncStore()
    s.start_initial_read(must_read_to_end)
    for up, down in syncs:
        s.add(OffsetSync(T, partition, up, down))
    if ready:
        s.finish_initial_read()
    return s


def omap(*runs: tuple[int, int, int]) -> OffsetMap:
    m = OffsetMap()
    for up, count, down in runs:
        m.add(T, P, up, count, down)
    return m


def tr(g: int, m: OffsetMap, s: OffsetSyncStore, partition: int = P) -> Translation | None:
    return translate(g, topic=T, partition=partition, offset_map=m, syncs=s)


def why(g: int, m: OffsetMap, s: OffsetSyncStore, partition: int = P) -> str:
    return why_not(g, topic=T, partition=partition, offset_map=m, syncs=s)


# -- OffsetSyncStore.lookup ---------------------------------------------------------------------


def test_lookup_returns_the_sync_translate_downstream_uses() -> None:
    # OffsetSyncStore's history: syncs 175, 275, 375, 475 read at start retain {475, 375, 175}.
    s = store((175, 175), (275, 275), (375, 375), (475, 475))
    assert [x.upstream_offset for x in s.retained(T, P)] == [475, 375, 175]

    def looked_up(g: int) -> int | None:
        sync = s.lookup(T, P, g)
        return None if sync is None else sync.upstream_offset

    assert looked_up(250) == 175 and s.translate_downstream(T, P, 250) == 176
    assert looked_up(370) == 175 and s.translate_downstream(T, P, 370) == 176
    assert looked_up(400) == 375 and s.translate_downstream(T, P, 400) == 376
    assert looked_up(475) == 475 and s.translate_downstream(T, P, 475) == 475
    assert looked_up(174) is None and s.translate_downstream(T, P, 174) == -1
    assert s.lookup(T, P + 1, 400) is None  # no history for the partition
    # The very object of the history, not a copy.
    assert any(s.lookup(T, P, 400) is x for x in s.retained(T, P))


def test_lookup_is_none_until_the_initial_read_finished() -> None:
    s = store((100, 200), ready=False)
    assert s.lookup(T, P, 150) is None
    s.finish_initial_read()
    sync = s.lookup(T, P, 150)
    assert sync is not None and (sync.upstream_offset, sync.downstream_offset) == (100, 200)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 300)), min_size=1, max_size=80),
    st.booleans(),
    st.lists(st.integers(0, 1000), min_size=1, max_size=20),
)
def test_lookup_agrees_with_translate_downstream(
    steps: list[tuple[int, int]], must_read_to_end: bool, queries: list[int]
) -> None:
    s = OffsetSyncStore()
    s.start_initial_read(must_read_to_end)
    up, down = 0, 0
    for i, (gap, jump) in enumerate(steps):
        up += gap if jump % 17 else -min(up, jump)  # mostly forward, sometimes rewound
        down += 1 + gap
        s.add(OffsetSync(T, P, up, down))
        if i == len(steps) // 2:
            s.finish_initial_read()
    s.finish_initial_read()
    for g in queries:
        answer = s.translate_downstream(T, P, g)
        sync = s.lookup(T, P, g)
        if answer is None or answer == -1:
            assert sync is None
        else:
            assert sync is not None and sync.upstream_offset <= g
            expected = sync.downstream_offset + (0 if g == sync.upstream_offset else 1)
            assert answer == expected


# -- translate ------------------------------------------------------------------------------------


def test_the_offset_map_answers_first() -> None:
    m = omap((300, 700, 1300))
    s = store((100, 1100), (300, 1300), (900, 1900))
    assert tr(450, m, s) == Translation(450, 1450, True, 0, "offset map")
    assert tr(1000, m, s) == Translation(1000, 2000, True, 0, "offset map")
    assert tr(1007, m, s) == Translation(1007, 2000, False, 7, "offset map")
    assert why(450, m, s) == ""


def test_before_the_map_falls_back_to_offset_syncs() -> None:
    # Records 0..299 were copied before the offset map existed; MM2 syncs cover them.
    m = omap((300, 700, 1300))
    s = store((100, 1100), (150, 1151), (200, 1201))
    assert tr(150, m, s) == Translation(150, 1151, True, 0, "offset sync")
    assert tr(151, m, s) == Translation(151, 1152, True, 0, "offset sync")  # nothing between
    assert tr(170, m, s) == Translation(170, 1152, False, 19, "offset sync")
    assert tr(299, m, s) == Translation(299, 1202, False, 98, "offset sync")
    assert tr(300, m, s) == Translation(300, 1300, True, 0, "offset map")


def test_neither_can_translate() -> None:
    m = omap((300, 700, 1300))
    s = store((100, 1100), (200, 1201))
    assert tr(50, m, s) is None
    assert why(50, m, s) == (
        "orders-1: cannot translate offset 50: it is older than the offset map's history "
        "(which starts at 300); it is older than every retained offset sync (the oldest is at "
        "100)"
    )
    not_ready = store((100, 1100), ready=False)
    assert tr(150, m, not_ready) is None
    assert why(150, m, not_ready) == (
        "orders-1: cannot translate offset 150: it is older than the offset map's history "
        "(which starts at 300); the offset syncs are not ready (the offset-syncs topic has "
        "not been read to its end yet)"
    )
    nothing = OffsetMap()
    assert tr(5, nothing, store(), partition=4) is None
    assert why(5, nothing, store(), partition=4) == (
        "orders-4: cannot translate offset 5: the offset map has nothing for this partition; "
        "no offset sync has been seen for this partition"
    )
    assert tr(-1, m, s) is None
    assert why(-1, m, s) == "orders-1: no committed offset"


def test_a_forgotten_map_history_says_where_it_starts() -> None:
    m = omap((0, 100, 0))
    m.forget_before(T, P, 100)
    assert tr(50, m, store()) is None
    assert "offset map's history (which starts at 100)" in why(50, m, store())


def test_lagging_group_behind_a_long_replication_flow() -> None:
    # testOffsetTranslationBehindReplicationFlow: 10 000 records, the group commits at 90 %,
    # then rewinds to 10 %.
    # Downstream the remote topic had 500 records already and every batch of 100 is followed
    # by a commit marker.  MM2 syncs (offset.lag.max = 10) are read alongside.
    m = OffsetMap()
    s = store()
    for batch in range(100):
        down = 500 + batch * 101
        m.add(T, P, batch * 100, 100, down)
        for i in range(0, 100, 10):
            s.add(OffsetSync(T, P, batch * 100 + i, down + i))
    at_90 = tr(9000, m, s)
    at_10 = tr(1000, m, s)
    assert at_90 == Translation(9000, 500 + 90 * 101, True, 0, "offset map")
    assert at_10 == Translation(1000, 500 + 10 * 101, True, 0, "offset map")
    assert at_10.downstream_offset < at_90.downstream_offset
    # The sparse syncs alone only bound the old position: never beyond the true one.
    mm2 = s.translate_downstream(T, P, 1005)
    assert mm2 is not None and 0 < mm2 <= 500 + 10 * 101 + 5
    sparse = tr(1005, OffsetMap(), s)
    assert sparse is not None and sparse.basis == "offset sync"
    assert sparse.downstream_offset == mm2
    assert sparse.downstream_offset <= 500 + 10 * 101 + 5
    assert not sparse.exact and sparse.max_duplicates > 0


def _runs_for(n: int, spacing: Iterable[int]) -> OffsetMap:
    m = OffsetMap()
    up = 0
    for count in spacing:
        m.add(T, P, up, count, up)
        up += count + 1
    return m


def test_gaps_in_the_map_are_exact_without_syncs() -> None:
    m = _runs_for(3, [10, 10, 10])  # 0..9, 11..20, 22..31 (10 and 21 compacted away)
    assert tr(10, m, store()) == Translation(10, 11, True, 0, "offset map")
    assert tr(21, m, store()) == Translation(21, 22, True, 0, "offset map")
