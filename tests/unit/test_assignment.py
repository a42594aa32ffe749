"""Sticky, load-aware partition assignment (mirrorline.core.assignment)."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Mapping
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirrorline.core.assignment import (
    DEFAULT_TOLERANCE,
    PartitionKey,
    assign,
    moves,
    worker_loads,
)

FLOW = "primary->backup"


def keys(topic: str, count: int, flow: str = FLOW) -> list[PartitionKey]:
    return [PartitionKey(flow, topic, i) for i in range(count)]


def counts(assignment: Mapping[PartitionKey, str], workers: list[str]) -> dict[str, int]:
    tally = Counter(assignment.values())
    return {w: tally[w] for w in workers}


def check_complete(
    result: Mapping[PartitionKey, str], partitions: list[PartitionKey], workers: list[str]
) -> None:
    assert set(result) == set(partitions)
    assert set(result.values()) <= set(workers)


# -- basics -------------------------------------------------------------------------------------


def test_partition_key_orders_by_flow_topic_partition() -> None:
    ks = [PartitionKey("b->a", "t", 0), PartitionKey("a->b", "t", 10), PartitionKey("a->b", "t", 2)]
    assert sorted(ks) == [ks[2], ks[1], ks[0]]


def test_empty_cases() -> None:
    parts = keys("t", 3)
    assert assign({}, [], []) == {}
    assert assign({}, parts, []) == {}
    assert assign({parts[0]: "w1"}, parts, []) == {}
    assert assign({}, [], ["w1", "w2"]) == {}
    assert assign({parts[0]: "w1"}, [], ["w1"]) == {}
    assert moves({}, {}) == {}
    assert worker_loads({}, None, []) == {}
    assert worker_loads({}, None, ["w1"]) == {"w1": 0.0}


def test_every_partition_assigned_once_to_a_given_worker() -> None:
    parts = keys("a", 7) + keys("b", 5, flow="backup->primary")
    workers = ["w1", "w2", "w3"]
    result = assign({}, parts, workers)
    check_complete(result, parts, workers)
    assert list(result) == sorted(parts)  # ordered by key


def test_single_worker_takes_everything() -> None:
    parts = keys("t", 5)
    assert assign({}, parts, ["only"], {parts[0]: 1e9}) == dict.fromkeys(parts, "only")


def test_duplicate_inputs_are_collapsed() -> None:
    parts = keys("t", 4)
    assert assign({}, parts + parts, ["w1", "w2", "w1"]) == assign({}, parts, ["w1", "w2"])


@pytest.mark.parametrize("tolerance", [-0.1, math.nan, math.inf])
def test_invalid_tolerance_is_rejected(tolerance: float) -> None:
    with pytest.raises(ValueError, match="tolerance"):
        assign({}, keys("t", 2), ["w1"], tolerance=tolerance)


def test_stale_partitions_and_gone_workers() -> None:
    parts = keys("t", 4)
    gone = PartitionKey(FLOW, "deleted", 0)
    current = {parts[0]: "w1", parts[1]: "dead", parts[2]: "w2", gone: "w1"}
    result = assign(current, parts, ["w1", "w2"], allow_moves=False)
    assert gone not in result
    assert result[parts[0]] == "w1"
    assert result[parts[2]] == "w2"
    check_complete(result, parts, ["w1", "w2"])


# -- count balance ------------------------------------------------------------------------------


def test_count_balance_twelve_on_three() -> None:
    result = assign({}, keys("t", 12), ["w1", "w2", "w3"])
    assert counts(result, ["w1", "w2", "w3"]) == {"w1": 4, "w2": 4, "w3": 4}


def test_count_balance_thirteen_on_three() -> None:
    result = assign({}, keys("t", 13), ["w1", "w2", "w3"])
    assert sorted(counts(result, ["w1", "w2", "w3"]).values()) == [4, 4, 5]


def test_all_zero_loads_balance_by_count() -> None:
    parts = keys("t", 12)
    result = assign({}, parts, ["w1", "w2", "w3"], dict.fromkeys(parts, 0.0))
    assert counts(result, ["w1", "w2", "w3"]) == {"w1": 4, "w2": 4, "w3": 4}


def test_fresh_placement_is_round_robin_by_worker_id() -> None:
    parts = keys("t", 4)
    result = assign({}, parts, ["b", "a"])
    assert [result[p] for p in parts] == ["a", "b", "a", "b"]


# -- stickiness ---------------------------------------------------------------------------------


def balanced_twelve() -> tuple[list[PartitionKey], dict[PartitionKey, str]]:
    parts = keys("t", 12)
    return parts, assign({}, parts, ["w1", "w2", "w3"])


def test_adding_a_worker_moves_exactly_three_partitions_to_it() -> None:
    parts, before = balanced_twelve()
    after = assign(before, parts, ["w1", "w2", "w3", "w4"])
    moved = moves(before, after)
    assert len(moved) == 3
    assert all(new == "w4" for _, new in moved.values())
    assert sorted(old or "" for old, _ in moved.values()) == ["w1", "w2", "w3"]
    assert counts(after, ["w1", "w2", "w3", "w4"]) == {"w1": 3, "w2": 3, "w3": 3, "w4": 3}


def test_removing_a_worker_moves_only_its_partitions() -> None:
    parts = keys("t", 12)
    before = assign({}, parts, ["w1", "w2", "w3", "w4"])
    after = assign(before, parts, ["w1", "w2", "w3"])
    moved = moves(before, after)
    assert set(moved) == {p for p, w in before.items() if w == "w4"}
    assert all(old == "w4" for old, _ in moved.values())
    assert counts(after, ["w1", "w2", "w3"]) == {"w1": 4, "w2": 4, "w3": 4}


def test_adding_a_topic_without_moves_keeps_existing_assignments() -> None:
    parts, before = balanced_twelve()
    # make w3 the lightest by load: its partitions carry less traffic
    loads = {p: (10.0 if w == "w3" else 100.0) for p, w in before.items()}
    new = keys("fresh", 2)
    after = assign(before, parts + new, ["w1", "w2", "w3"], loads, allow_moves=False)
    assert {p: after[p] for p in parts} == before
    assert moves(before, after) == {p: (None, "w3") for p in new}


def test_adding_a_topic_without_moves_spreads_new_partitions_to_the_least_loaded() -> None:
    parts, before = balanced_twelve()
    new = keys("fresh", 3)
    after = assign(before, parts + new, ["w1", "w2", "w3"], allow_moves=False)
    assert {p: after[p] for p in parts} == before
    assert sorted(after[p] for p in new) == ["w1", "w2", "w3"]


def test_without_moves_nothing_is_rebalanced() -> None:
    parts = keys("t", 6)
    current = dict.fromkeys(parts, "w1")
    assert assign(current, parts, ["w1", "w2"], allow_moves=False) == current
    assert counts(assign(current, parts, ["w1", "w2"]), ["w1", "w2"]) == {"w1": 3, "w2": 3}


def test_imbalance_within_tolerance_is_left_alone() -> None:
    parts = keys("t", 40)
    current = {p: ("w1" if i < 22 else "w2") for i, p in enumerate(parts)}  # mean 20, band 3
    assert assign(current, parts, ["w1", "w2"]) == current
    assert counts(assign(current, parts, ["w1", "w2"], tolerance=0.0), ["w1", "w2"]) == {
        "w1": 20,
        "w2": 20,
    }


def test_new_worker_is_filled_up_to_the_band_not_left_half_empty() -> None:
    parts = keys("t", 40)
    before = assign({}, parts, ["w1", "w2", "w3", "w4"])  # 10 each; add one: fair share 8
    after = assign(before, parts, ["w1", "w2", "w3", "w4", "w5"])
    per_worker = counts(after, ["w1", "w2", "w3", "w4", "w5"])
    assert all(8 * 0.85 <= n <= 8 * 1.15 for n in per_worker.values())
    assert all(new == "w5" for _, new in moves(before, after).values())


# -- load awareness -----------------------------------------------------------------------------


def test_hot_partition_worker_gets_fewer_other_partitions() -> None:
    parts = keys("t", 10)
    hot = parts[0]
    loads = {p: 1_000_000.0 for p in parts} | {hot: 5_000_000.0}  # bytes/s
    result = assign({}, parts, ["w1", "w2", "w3"], loads)
    per_worker = counts(result, ["w1", "w2", "w3"])
    owner = result[hot]
    assert all(per_worker[owner] < n for w, n in per_worker.items() if w != owner)
    total = worker_loads(result, loads, ["w1", "w2", "w3"])
    assert total == {w: per_worker[w] * 1e6 + (4e6 if w == owner else 0.0) for w in total}
    assert max(total.values()) <= 5_000_000.0


def test_rebalance_moves_partitions_off_the_hot_worker() -> None:
    parts = keys("t", 12)
    before = assign({}, parts, ["w1", "w2", "w3"])  # 4 each, by count
    hot = next(p for p, w in before.items() if w == "w1")
    loads = dict.fromkeys(parts, 1000.0) | {hot: 8000.0}
    after = assign(before, parts, ["w1", "w2", "w3"], loads)
    assert after[hot] == "w1"  # sticky: the hot one stays, its neighbours leave
    assert counts(after, ["w1", "w2", "w3"])["w1"] == 1
    assert all(old == "w1" for old, _ in moves(before, after).values())
    total = worker_loads(after, loads, ["w1", "w2", "w3"])
    assert total["w1"] == 8000.0
    assert sorted([total["w2"], total["w3"]]) == [5000.0, 6000.0]


def test_unmeasured_partitions_count_as_the_mean_measurement() -> None:
    a, b, c, d = keys("t", 4)
    loads = {a: 100.0, b: 300.0, c: 0.0}  # c: zero, d: missing -> both count as 200
    assignment = {a: "w1", b: "w2", c: "w1", d: "w2"}
    assert worker_loads(assignment, loads, ["w1", "w2", "w3"]) == {
        "w1": 300.0,
        "w2": 500.0,
        "w3": 0.0,
    }
    assert worker_loads(assignment, None, ["w1", "w2"]) == {"w1": 2.0, "w2": 2.0}
    assert worker_loads(assignment, {}, ["w2", "gone"]) == {"gone": 0.0, "w2": 2.0}


def test_new_partitions_go_to_the_lowest_load_not_the_fewest_partitions() -> None:
    parts = keys("t", 4)
    current = {parts[0]: "w1", parts[1]: "w2", parts[2]: "w2"}
    loads = {parts[0]: 900.0, parts[1]: 100.0, parts[2]: 100.0}
    result = assign(current, parts, ["w1", "w2"], loads, allow_moves=False)
    assert result[parts[3]] == "w2"


def test_heaviest_new_partition_is_placed_first() -> None:
    parts = keys("t", 3)
    loads = {parts[0]: 1.0, parts[1]: 1.0, parts[2]: 10.0}
    result = assign({}, parts, ["w1", "w2"], loads, allow_moves=False)
    assert result == {parts[0]: "w2", parts[1]: "w2", parts[2]: "w1"}


def test_placement_ties_on_load_go_to_the_worker_with_fewer_partitions() -> None:
    a, b, c, new = keys("t", 4)
    current = {a: "w1", b: "w1", c: "w2"}
    loads = {a: 100.0, b: 100.0, c: 200.0}
    assert assign(current, [a, b, c, new], ["w1", "w2"], loads, allow_moves=False)[new] == "w2"


def test_rebalance_moves_the_partition_that_evens_out_the_pair_in_one_step() -> None:
    light, middle, heavy, other = keys("t", 4)
    current = {light: "w1", middle: "w1", heavy: "w1", other: "w2"}
    loads = {light: 10.0, middle: 50.0, heavy: 90.0, other: 50.0}  # 150 vs 50
    result = assign(current, list(current), ["w1", "w2"], loads)
    assert moves(current, result) == {middle: ("w1", "w2")}


def test_equally_good_moves_prefer_the_lighter_partition() -> None:
    small, big = keys("t", 2)
    loads = {small: 30.0, big: 70.0}
    result = assign(dict.fromkeys([small, big], "w1"), [small, big], ["w1", "w2"], loads)
    assert result == {small: "w2", big: "w1"}


def test_partition_heavier_than_the_mean_stays_put_and_alone() -> None:
    parts = keys("t", 9)
    heavy = parts[0]
    loads = dict.fromkeys(parts, 10.0) | {heavy: 1000.0}
    current = {p: ("w1" if p == heavy else "w2") for p in parts}
    result = assign(current, parts, ["w1", "w2", "w3"], loads)
    assert result[heavy] == "w1"
    assert counts(result, ["w1", "w2", "w3"]) == {"w1": 1, "w2": 4, "w3": 4}
    assert assign(result, parts, ["w1", "w2", "w3"], loads) == result


def test_tolerance_band_is_around_the_share_left_after_heavy_partitions() -> None:
    heavy, *rest = keys("t", 21)
    loads = dict.fromkeys(rest, 10.0) | {heavy: 1000.0}
    # the others can never reach the plain mean (400): their fair share is 100 each, and
    # 110 / 90 is within 15 % of it, so nothing moves
    current = {heavy: "w1"} | {p: ("w2" if i < 11 else "w3") for i, p in enumerate(rest)}
    assert assign(current, list(current), ["w1", "w2", "w3"], loads) == current
    tight = assign(current, list(current), ["w1", "w2", "w3"], loads, tolerance=0.0)
    assert len(moves(current, tight)) == 1
    assert worker_loads(tight, loads, ["w1", "w2", "w3"]) == {
        "w1": 1000.0,
        "w2": 100.0,
        "w3": 100.0,
    }


def test_two_partitions_each_heavier_than_the_mean_do_not_ping_pong() -> None:
    parts = keys("t", 2)
    loads = {parts[0]: 500.0, parts[1]: 700.0}
    result = assign({}, parts, ["w1", "w2", "w3"], loads)
    assert sorted(result.values()) == ["w1", "w2"]
    assert assign(result, parts, ["w1", "w2", "w3"], loads) == result


# -- moves --------------------------------------------------------------------------------------


def test_moves_reports_changed_and_new_partitions_only() -> None:
    a, b, c, d = keys("t", 4)
    old = {a: "w1", b: "w1", d: "w2"}
    new = {a: "w1", b: "w2", c: "w3"}
    assert moves(old, new) == {b: ("w1", "w2"), c: (None, "w3")}
    assert list(moves(old, {c: "w3", b: "w2"})) == [b, c]


# -- properties ---------------------------------------------------------------------------------

WORKER_IDS = [f"w{i}" for i in range(6)]
ALL_KEYS = [PartitionKey(f, t, i) for f in ("a->b", "b->a") for t in ("t1", "t2") for i in range(6)]

keys_st = st.lists(st.sampled_from(ALL_KEYS), unique=True, max_size=len(ALL_KEYS))
workers_st = st.lists(st.sampled_from(WORKER_IDS), unique=True, max_size=len(WORKER_IDS))
current_st = st.dictionaries(st.sampled_from(ALL_KEYS), st.sampled_from([*WORKER_IDS, "gone"]))
load_value_st = st.one_of(
    st.just(0.0),
    st.floats(min_value=0.001, max_value=1e9, allow_nan=False),
    st.sampled_from([1.0, 10.0, 1e6, 1e12]),
)
loads_st = st.one_of(st.none(), st.dictionaries(st.sampled_from(ALL_KEYS), load_value_st))


@settings(max_examples=300, deadline=None)
@given(current_st, keys_st, workers_st, loads_st, st.booleans())
def test_property_complete_and_idempotent(
    current: dict[PartitionKey, str],
    partitions: list[PartitionKey],
    workers: list[str],
    loads: dict[PartitionKey, float] | None,
    allow_moves: bool,
) -> None:
    first = assign(current, partitions, workers, loads, allow_moves=allow_moves)
    if workers:
        check_complete(first, partitions, workers)
    else:
        assert first == {}
    # live owners are kept unless moves are allowed
    if not allow_moves:
        for p, w in current.items():
            if p in first and w in workers:
                assert first[p] == w
    again = assign(first, partitions, workers, loads, allow_moves=allow_moves)
    assert again == first
    assert moves(first, again) == {}


@settings(max_examples=200, deadline=None)
@given(current_st, keys_st, workers_st, loads_st, st.booleans(), st.randoms(use_true_random=False))
def test_property_deterministic_under_permutation(
    current: dict[PartitionKey, str],
    partitions: list[PartitionKey],
    workers: list[str],
    loads: dict[PartitionKey, float] | None,
    allow_moves: bool,
    rnd: random.Random,
) -> None:
    expected = assign(current, partitions, workers, loads, allow_moves=allow_moves)
    current_items = list(current.items())
    rnd.shuffle(current_items)
    parts2, workers2 = list(partitions), list(workers)
    rnd.shuffle(parts2)
    rnd.shuffle(workers2)
    loads2 = None
    if loads is not None:
        load_items = list(loads.items())
        rnd.shuffle(load_items)
        loads2 = dict(load_items)
    result = assign(
        dict(current_items), set(parts2), tuple(workers2), loads2, allow_moves=allow_moves
    )
    assert list(result.items()) == list(expected.items())
    assert list(worker_loads(result, loads2, workers2).items()) == list(
        worker_loads(expected, loads, workers).items()
    )


@settings(max_examples=300, deadline=None)
@given(current_st, keys_st, workers_st)
def test_property_count_balance_without_tolerance(
    current: dict[PartitionKey, str], partitions: list[PartitionKey], workers: list[str]
) -> None:
    result = assign(current, partitions, workers, tolerance=0.0)
    if workers:
        per_worker = counts(result, workers).values()
        assert max(per_worker) - min(per_worker) <= 1


@settings(max_examples=300, deadline=None)
@given(current_st, keys_st, workers_st)
def test_property_count_balance_within_default_tolerance(
    current: dict[PartitionKey, str], partitions: list[PartitionKey], workers: list[str]
) -> None:
    result = assign(current, partitions, workers)
    if workers:
        per_worker = counts(result, workers).values()
        mean = len(partitions) / len(workers)
        assert max(per_worker) - min(per_worker) <= max(1, 2 * DEFAULT_TOLERANCE * mean)
        if mean * DEFAULT_TOLERANCE < 1:  # the band is narrower than one partition
            assert max(per_worker) - min(per_worker) <= 1


def effective_weights(
    partitions: list[PartitionKey], loads: Mapping[PartitionKey, float]
) -> dict[PartitionKey, Fraction]:
    """The weighting rule, restated exactly: unmeasured = mean of the positive measurements."""
    measured = {p: Fraction(loads[p]) for p in partitions if loads.get(p, 0.0) > 0}
    default = sum(measured.values(), Fraction(0)) / max(1, len(measured)) or Fraction(1)
    return {p: measured.get(p, default) for p in partitions}


@settings(max_examples=400, deadline=None)
@given(
    current_st,
    keys_st,
    st.lists(st.sampled_from(WORKER_IDS), unique=True, min_size=1, max_size=len(WORKER_IDS)),
    st.dictionaries(st.sampled_from(ALL_KEYS), load_value_st),
    st.sampled_from([0.0, 0.05, DEFAULT_TOLERANCE, 0.5]),
)
def test_property_random_loads_terminate_and_settle(
    current: dict[PartitionKey, str],
    partitions: list[PartitionKey],
    workers: list[str],
    loads: dict[PartitionKey, float],
    tolerance: float,
) -> None:
    # heavy partitions (1e12 among 1.0s) are common here: reaching the asserts means the
    # rebalance terminated, and a fixed point means it will not move anything next time
    result = assign(current, partitions, workers, loads, tolerance=tolerance)
    check_complete(result, partitions, workers)
    assert assign(result, partitions, workers, loads, tolerance=tolerance) == result
    if not partitions:
        return
    weight = effective_weights(partitions, loads)
    load = dict.fromkeys(workers, Fraction(0))
    for p, w in result.items():
        load[w] += weight[p]
    assert worker_loads(result, loads, workers) == {w: float(v) for w, v in load.items()}
    # stable: a worker above mean + tolerance * mean holds only partitions that are too heavy
    # to move to the least loaded worker without making that one the new maximum
    mean = sum(load.values()) / len(workers)
    lightest = min(load.values())
    for w in workers:
        if load[w] > mean * (1 + Fraction(tolerance)):
            gap = load[w] - lightest
            assert all(weight[p] >= gap for p, owner in result.items() if owner == w)


def test_a_join_moves_partitions_only_to_the_joining_worker() -> None:
    """Survivors w1/w2 are skewed (w1 still measures a recent catch-up). When w3 joins with
    `receivers={"w3"}`, partitions go only to w3; nothing moves from w1 to w2, which a full
    rebalance would do to even them out."""
    parts = keys("t", 12)
    current = {p: ("w1" if i < 6 else "w2") for i, p in enumerate(parts)}
    loads = {p: (9.0 if i < 6 else 1.0) for i, p in enumerate(parts)}
    full = assign(current, parts, ["w1", "w2", "w3"], loads)
    assert any(current[p] == "w1" and full[p] == "w2" for p in parts)  # what a review does
    joined = assign(current, parts, ["w1", "w2", "w3"], loads, receivers={"w3"})
    changed = [p for p in parts if joined[p] != current[p]]
    assert changed and all(joined[p] == "w3" for p in changed)
