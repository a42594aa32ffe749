"""Pure failover planning: group and flow readiness, failover to a time, failback divergence."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirrorline.core.failover import (
    SOURCE_UNREACHABLE,
    FlowPartition,
    GroupPartition,
    GroupReadiness,
    diverged,
    first_at_or_after,
    flow_readiness,
    group_readiness,
    verify_time_answer,
)
from mirrorline.core.translation import Translation

NOW = 1_700_000_000_000


def exact(g: int, d: int) -> Translation:
    return Translation(g, d, True, 0, "offset map")


def bound(g: int, d: int, dups: int) -> Translation:
    return Translation(g, d, False, dups, "offset sync")


def part(
    partition: int,
    committed: int | None,
    source_end: int | None,
    replicated: int | None,
    translation: Translation | None,
    why: str = "",
) -> GroupPartition:
    return GroupPartition("orders", partition, "primary.orders", committed, source_end,
                          replicated, translation, why)


def readiness(*parts: GroupPartition, members: int = 0,
              checkpoint: int | None = NOW - 5_000) -> GroupReadiness:
    return group_readiness("billing", parts, newest_checkpoint_ms=checkpoint,
                           active_members=members, now_ms=NOW)


# -- group readiness ------------------------------------------------------------------------------


def test_a_caught_up_group_is_safe() -> None:
    r = readiness(part(0, 500, 500, 500, exact(500, 1500)),
                  part(1, 200, 300, 300, exact(200, 1200)))
    assert r == GroupReadiness("billing", True, [], 0, 0, 5_000, 0)


def test_unmirrored_records_beyond_the_committed_offset() -> None:
    # orders-3: source end 1000, replicated 880, committed 700 -> 120 not mirrored.
    r = readiness(part(3, 700, 1000, 880, exact(700, 1700)))
    assert not r.safe
    assert r.records_not_mirrored == 120
    assert r.reasons == ["orders-3: 120 records not mirrored yet"]


def test_records_the_group_consumed_already_do_not_count() -> None:
    # The group is ahead of the replication (committed 950 > replicated 880): 50 records it
    # has not consumed are missing; it is also a bound (the 70 in between are seen again).
    r = readiness(part(3, 950, 1000, 880, bound(950, 1880, 70)))
    assert r.records_not_mirrored == 50
    assert r.expected_duplicates == 70
    assert r.reasons == [
        "orders-3: 50 records not mirrored yet",
        "orders-3: translation is a bound (up to 70 records seen twice)",
    ]
    one = readiness(part(3, 999, 1000, 1000, bound(999, 1500, 1)))
    assert one.reasons == ["orders-3: translation is a bound (up to 1 record seen twice)"]


def test_bounds_add_up_and_make_the_group_unsafe() -> None:
    r = readiness(part(1, 100, 100, 100, bound(100, 180, 7)),
                  part(2, 50, 50, 50, bound(50, 90, 3)))
    assert not r.safe
    assert r.expected_duplicates == 10
    assert r.reasons == [
        "orders-1: translation is a bound (up to 7 records seen twice)",
        "orders-2: translation is a bound (up to 3 records seen twice)",
    ]


def test_untranslated_committed_partition() -> None:
    r = readiness(part(4, 10, 10, 10, None, why="orders-4: cannot translate offset 10: ..."),
                  part(5, 10, 10, 10, None))
    assert not r.safe
    assert r.reasons == [
        "orders-4: cannot translate offset 10: ...",
        "orders-5: committed offset 10 cannot be translated",
    ]


def test_partitions_without_a_committed_offset_need_no_translation() -> None:
    r = readiness(part(6, None, 40, 40, None))
    assert r.safe
    missing = readiness(part(6, None, 40, 30, None))
    assert missing.reasons == ["orders-6: 10 records not mirrored yet"]
    unknown = readiness(part(6, None, 40, None, None))  # counted from 0: an upper bound
    assert unknown.records_not_mirrored == 40


def test_active_members_on_the_target() -> None:
    r = readiness(part(0, 5, 5, 5, exact(5, 5)), members=2)
    assert r.reasons == ["group has 2 active members on the target"]
    assert r.active_members == 2 and not r.safe
    assert readiness(part(0, 5, 5, 5, exact(5, 5)), members=1).reasons == [
        "group has 1 active member on the target"
    ]


def test_unreachable_source() -> None:
    r = readiness(part(0, 5, None, 5, exact(5, 5)), part(1, 5, None, 5, exact(5, 5)))
    assert not r.safe
    assert r.reasons == [SOURCE_UNREACHABLE]
    assert SOURCE_UNREACHABLE == (
        "the source cluster is unreachable: readiness of unmirrored records unknown"
    )
    assert r.records_not_mirrored == 0


def test_every_reason_together_and_checkpoint_age() -> None:
    r = readiness(
        part(0, None, None, 5, None),
        part(1, 100, 100, 100, bound(100, 108, 7)),
        part(3, 700, 820, 700, exact(700, 700)),
        members=3,
        checkpoint=NOW - 61_000,
    )
    assert r.reasons == [
        SOURCE_UNREACHABLE,
        "orders-1: translation is a bound (up to 7 records seen twice)",
        "orders-3: 120 records not mirrored yet",
        "group has 3 active members on the target",
    ]
    assert (r.expected_duplicates, r.records_not_mirrored, r.checkpoint_age_ms) == (7, 120, 61_000)
    assert readiness(checkpoint=None).checkpoint_age_ms is None
    assert readiness(checkpoint=NOW + 10).checkpoint_age_ms == 0  # clock skew
    assert readiness().safe  # no partition: nothing to lose


def test_a_translation_of_another_offset_is_a_caller_bug() -> None:
    with pytest.raises(ValueError):
        readiness(part(0, 10, 10, 10, exact(11, 11)))


# -- flow readiness -------------------------------------------------------------------------------


def test_flow_readiness_sums_lag_and_takes_the_largest_lag_ms() -> None:
    safe = readiness(part(0, 5, 5, 5, exact(5, 5)))
    unsafe = readiness(part(0, 5, 5, 5, exact(5, 5)), members=1)
    parts = [
        FlowPartition("orders", 0, 1000, 880, 250.0),
        FlowPartition("orders", 1, 500, 500, 0.0),
        FlowPartition("orders", 2, 70, 90, None),  # replicated beyond the end: no lag
        FlowPartition("orders", 3, 30, None, 1200.5),  # unknown replicated: counted from 0
    ]
    f = flow_readiness("primary->backup", parts, [safe])
    assert (f.lag_records, f.lag_ms, f.safe, f.source_reachable) == (150, 1200.5, True, True)
    assert f.groups == [safe]
    assert not flow_readiness("primary->backup", parts, [safe, unsafe]).safe
    down = flow_readiness("primary->backup", [FlowPartition("orders", 0, None, 5)], [])
    assert (down.safe, down.source_reachable, down.lag_records, down.lag_ms) == (
        False, False, 0, 0.0)
    assert flow_readiness("primary->backup", [], []).safe


# -- failover to a time ---------------------------------------------------------------------------


# (offset, timestamp) with non-monotonic timestamps: log start 10.
RECORDS = [(10, 100), (11, 300), (12, 200), (13, 250), (14, 400), (15, 350)]


def ts_at(offset: int) -> int | None:
    return dict(RECORDS).get(offset)


def verify(candidate: int, target_ms: int) -> bool:
    return verify_time_answer(candidate, ts_at(candidate), ts_at(candidate - 1), target_ms, 10)


def test_first_at_or_after_in_offset_order() -> None:
    assert first_at_or_after(RECORDS, 0) == 10
    assert first_at_or_after(RECORDS, 100) == 10
    assert first_at_or_after(RECORDS, 101) == 11
    assert first_at_or_after(RECORDS, 200) == 11  # 300 comes first in offset order
    assert first_at_or_after(RECORDS, 301) == 14
    assert first_at_or_after(RECORDS, 360) == 14
    assert first_at_or_after(RECORDS, 401) is None
    assert first_at_or_after([], 5) is None
    with pytest.raises(ValueError):
        first_at_or_after([(5, 0), (4, 10)], 10)


def test_verify_accepts_the_right_answers() -> None:
    for target in (0, 100, 101, 200, 301, 360):
        right = first_at_or_after(RECORDS, target)
        assert right is not None and verify(right, target), target
    # At the log end (16): right iff the last record is older than T.
    assert verify_time_answer(16, None, 350, 401, 10)
    assert not verify_time_answer(16, None, 350, 350, 10)
    # An empty partition: the log end is the log start.
    assert verify_time_answer(7, None, None, 123, 7)
    assert not verify_time_answer(8, None, None, 123, 7)


def test_verify_rejects_a_broker_that_always_answers_zero() -> None:
    # A broker answering 0 whatever the time: log start 0, record 0 at ts 100.
    assert not verify_time_answer(0, 100, None, 200, 0)
    assert verify_time_answer(0, 100, None, 50, 0)  # when 0 happens to be right
    # ... or an offset below the log start.
    assert not verify_time_answer(0, 100, None, 50, 10)
    assert not verify(10, 101)


def test_verify_rejects_wrong_answers() -> None:
    assert not verify(11, 100)  # its predecessor is already at T
    assert not verify(12, 250)  # ts 200 < T
    assert not verify(13, 260)  # ts 250 < T
    assert not verify(15, 360)  # ts 350 < T
    assert not verify_time_answer(16, None, 350, 300, 10)  # the end, but 350 >= T
    assert not verify_time_answer(16, None, None, 300, 10)  # the end of a non-empty log, unknown


def test_verify_is_a_local_check_with_non_monotonic_timestamps() -> None:
    # With T = 260 the answer is 11 (ts 300); 14 (ts 400, predecessor 250) passes the local
    # check: only the scan decides.  Documented limitation.
    assert first_at_or_after(RECORDS, 260) == 11
    assert verify(11, 260)
    assert verify(14, 260)


@settings(max_examples=200)
@given(st.lists(st.integers(0, 50), max_size=30), st.integers(0, 60), st.integers(0, 5))
def test_the_scan_answer_always_verifies(ts: list[int], target: int, start: int) -> None:
    records = [(start + i, t) for i, t in enumerate(ts)]
    answer = first_at_or_after(records, target)
    end = start + len(records)
    at = dict(records)
    candidate = end if answer is None else answer
    assert verify_time_answer(candidate, at.get(candidate), at.get(candidate - 1), target, start)
    # Every earlier candidate is rejected when timestamps are monotonic.
    if ts == sorted(ts):
        for c in range(start, candidate):
            assert not verify_time_answer(c, at.get(c), at.get(c - 1), target, start)


# -- failback -------------------------------------------------------------------------------------


def test_diverged() -> None:
    assert diverged(1000, 880) == 120
    assert diverged(880, 880) == 0
    assert diverged(800, 880) == 0
