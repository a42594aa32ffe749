"""The controller's next step: grants, fenced hand-overs, expiry."""

from __future__ import annotations

from mirrorline.core.assignment import PartitionKey
from mirrorline.core.control import ControlState, Ownership
from mirrorline.core.reconcile import WorkerReport, plan

FLOW = "a->b"


def key(p: int, topic: str = "t") -> PartitionKey:
    return PartitionKey(FLOW, topic, p)


def desired(*parts: int, topic: str = "t") -> dict[PartitionKey, str]:
    return {key(p, topic): f"a.{topic}" for p in parts}


def state_with(owners: dict[int, str], revoking: dict[int, tuple[str, int]] | None = None
               ) -> ControlState:
    state = ControlState(epoch=1, leader_id="c")
    state.owners = {key(p): Ownership(w, "a.t", 1) for p, w in owners.items()}
    state.revoking = {key(p): Ownership(w, "a.t", off)
                      for p, (w, off) in (revoking or {}).items()}
    return state


def report(applied: int, *owned: int) -> WorkerReport:
    return WorkerReport(applied, frozenset(key(p) for p in owned))


def test_new_partitions_are_granted_balanced_to_live_workers() -> None:
    result = plan(ControlState(epoch=1, leader_id="c"), desired(0, 1, 2, 3), {"w1", "w2"}, {}, {},
                  expired=(), allow_moves=False)
    assert not result.revoke and not result.expire
    assert sorted(len(v) for v in result.grant.values()) == [2, 2]
    assert {k for v in result.grant.values() for k in v} == set(desired(0, 1, 2, 3))


def test_a_move_revokes_first_and_grants_only_after_the_release() -> None:
    state = state_with({0: "w1", 1: "w1", 2: "w1", 3: "w1"})
    result = plan(state, desired(0, 1, 2, 3), {"w1", "w2"}, {"w1": report(1, 0, 1, 2, 3)}, {},
                  expired=(), allow_moves=True)
    assert not result.grant  # nothing goes to w2 before w1 let go
    moved = result.revoke[(FLOW, "w1")]
    assert len(moved) == 2

    # Revoked at offset 5; w1's report as of offset 4 still lists them: not released.
    state = state_with({p: "w1" for p in range(4) if key(p) not in moved},
                       {k.partition: ("w1", 5) for k in moved})
    early = plan(state, desired(0, 1, 2, 3), {"w1", "w2"},
                 {"w1": report(4, *range(4))}, {}, expired=(), allow_moves=False)
    assert not early.grant
    # As of offset 5 it no longer runs them: now they go to w2.
    kept = [p for p in range(4) if key(p) not in moved]
    released = plan(state, desired(0, 1, 2, 3), {"w1", "w2"}, {"w1": report(5, *kept)}, {},
                    expired=(), allow_moves=False)
    assert released.grant == {(FLOW, "w2"): {k: "a.t" for k in moved}}


def test_an_expired_workers_partitions_are_reassigned_without_waiting_for_a_release() -> None:
    state = state_with({0: "w1", 1: "w2"}, {2: ("w2", 7)})
    result = plan(state, desired(0, 1, 2), {"w1"}, {"w1": report(9, 0)}, {},
                  expired={"w2"}, allow_moves=False)
    assert result.expire == ["w2"]
    assert result.grant == {(FLOW, "w1"): {key(1): "a.t", key(2): "a.t"}}


def test_a_silent_worker_keeps_its_partitions_until_its_lease_decides() -> None:
    state = state_with({0: "w1", 1: "w2"})
    result = plan(state, desired(0, 1), {"w1"}, {"w1": report(3, 0)}, {}, expired=(),
                  allow_moves=True)
    assert result.empty


def test_partitions_no_longer_wanted_are_revoked_and_a_new_remote_name_moves_them() -> None:
    state = state_with({0: "w1", 1: "w1"})
    result = plan(state, {key(0): "renamed"}, {"w1"}, {"w1": report(1, 0, 1)}, {}, expired=(),
                  allow_moves=False)
    assert result.revoke == {(FLOW, "w1"): {key(0): "a.t", key(1): "a.t"}}
    assert not result.grant


def test_adding_a_topic_grants_only_its_partitions() -> None:
    state = state_with({0: "w1", 1: "w2"})
    wanted = {**desired(0, 1), **desired(0, 1, 2, 3, topic="u")}
    result = plan(state, wanted, {"w1", "w2"}, {"w1": report(1, 0), "w2": report(1, 1)}, {},
                  expired=(), allow_moves=False)
    assert not result.revoke
    granted = {k for v in result.grant.values() for k in v}
    assert granted == set(desired(0, 1, 2, 3, topic="u"))


def test_a_released_partition_goes_where_its_move_meant_it_to() -> None:
    """w3 joins a 6/6 split: the joining round revokes two partitions from each survivor for
    w3. Releases arrive one survivor at a time, and by then the measured loads make w2 look
    lighter than w3 (w3 is catching up fast). The released partitions must still go to w3:
    re-placing them by load would move them from one survivor to the other."""
    owners = {p: ("w1" if p < 6 else "w2") for p in range(12)}
    want = desired(*range(12))
    joined = plan(state_with(owners), want, {"w1", "w2", "w3"}, {}, {}, expired=(),
                  allow_moves=True)
    assert set(joined.moving.values()) == {"w3"}
    from_w1 = joined.revoke[(FLOW, "w1")]
    assert len(from_w1) == 2 and len(joined.revoke[(FLOW, "w2")]) == 2

    # w1 has released its two; w2's are still outstanding. w2 measures light, w3 heavy.
    state = state_with({p: w for p, w in owners.items() if key(p) not in joined.moving},
                       {k.partition: ("w2", 9) for k in joined.revoke[(FLOW, "w2")]})
    loads = {key(p): (0.1 if owners[p] == "w2" else 5.0) for p in range(12)}
    kept_w1 = [p for p in range(6) if key(p) not in from_w1]
    reports = {"w1": report(9, *kept_w1), "w2": report(8, *range(6, 12))}
    without = plan(state, want, {"w1", "w2", "w3"}, reports, loads, expired=(),
                   allow_moves=False)
    assert (FLOW, "w2") in without.grant  # the trap: placed by load, it lands on a survivor
    released = plan(state, want, {"w1", "w2", "w3"}, reports, loads, expired=(),
                    allow_moves=False, destined=joined.moving)
    assert released.grant == {(FLOW, "w3"): dict.fromkeys(from_w1, "a.t")}
