"""Replaying the control log: determinism and fencing by epoch."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mirrorline.core.assignment import PartitionKey
from mirrorline.core.control import Outcome, replay
from mirrorline.v1 import control_pb2, flows_pb2

FLOW = "a->b"


def claim(epoch: int, who: str) -> control_pb2.ControlRecord:
    return control_pb2.ControlRecord(epoch=epoch, controller_id=who,
                                     leader_claimed=control_pb2.LeaderClaimed(address=f"{who}:1"))


def created(epoch: int, who: str, topics: str = ".*") -> control_pb2.ControlRecord:
    return control_pb2.ControlRecord(epoch=epoch, controller_id=who, flow_created=(
        control_pb2.FlowCreated(spec=flows_pb2.FlowSpec(source="a", target="b",
                                                        properties={"topics": topics}))))


def assigned(epoch: int, who: str, worker: str, *parts: int) -> control_pb2.ControlRecord:
    return control_pb2.ControlRecord(epoch=epoch, controller_id=who, partitions_assigned=(
        control_pb2.PartitionsAssigned(flow=FLOW, worker_id=worker, partitions=[
            control_pb2.PartitionRef(topic="t", partition=p, remote_topic="a.t")
            for p in parts])))


def revoked(epoch: int, who: str, worker: str, *parts: int) -> control_pb2.ControlRecord:
    return control_pb2.ControlRecord(epoch=epoch, controller_id=who, partitions_revoked=(
        control_pb2.PartitionsRevoked(flow=FLOW, worker_id=worker, partitions=[
            control_pb2.PartitionRef(topic="t", partition=p, remote_topic="a.t")
            for p in parts])))


def numbered(*records: control_pb2.ControlRecord) -> list[tuple[int, control_pb2.ControlRecord]]:
    return list(enumerate(records))


def test_the_first_claim_of_the_next_epoch_wins_and_later_claims_are_stale() -> None:
    state = replay(numbered(claim(1, "c1"), claim(1, "c2"), claim(2, "c2"), claim(2, "c1")))
    assert (state.epoch, state.leader_id, state.leader_address) == (2, "c2", "c2:1")
    assert state.rejected == 2


def test_a_deposed_controller_changes_nothing() -> None:
    records = numbered(claim(1, "c1"), created(1, "c1"), assigned(1, "c1", "w1", 0, 1),
                       claim(2, "c2"),
                       # c1 has not noticed: it keeps appending with its old epoch...
                       created(1, "c1", topics="other"), assigned(1, "c1", "w9", 2),
                       control_pb2.ControlRecord(epoch=1, controller_id="c1",
                                                 flow_deleted=control_pb2.FlowDeleted(flow=FLOW)),
                       # ...and a controller that claims the current epoch's number is not c2.
                       assigned(2, "c1", "w9", 3))
    state = replay(records)
    assert list(state.flows) == [FLOW]
    assert state.flows[FLOW].properties == {"topics": ".*"}
    assert {k.partition: o.worker_id for k, o in state.owners.items()} == {0: "w1", 1: "w1"}
    assert state.rejected == 4


def test_each_record_reports_its_outcome() -> None:
    state = replay(numbered(claim(1, "c1")))
    assert state.apply(1, created(1, "c1")) is Outcome.APPLIED
    assert state.apply(2, created(1, "c1")) is Outcome.INVALID  # exists already
    assert state.apply(3, created(0, "c1")) is Outcome.STALE
    assert state.applied_offset == 3


def test_nothing_counts_before_anyone_leads() -> None:
    state = replay(numbered(created(0, "c1"), assigned(0, "c1", "w", 0)))
    assert not state.flows and not state.owners


def test_revoke_moves_a_partition_to_revoking_until_it_is_assigned_again() -> None:
    state = replay(numbered(claim(1, "c"), created(1, "c"), assigned(1, "c", "w1", 0, 1),
                            revoked(1, "c", "w1", 1)))
    key = PartitionKey(FLOW, "t", 1)
    assert key not in state.owners and state.revoking[key].worker_id == "w1"
    assert state.revoking[key].offset == 3
    state.apply(4, assigned(1, "c", "w2", 1))
    assert state.owners[key].worker_id == "w2" and key not in state.revoking
    assert state.owned_by("w1") == {PartitionKey(FLOW, "t", 0): "a.t"}


def test_a_revoke_for_another_worker_does_nothing() -> None:
    state = replay(numbered(claim(1, "c"), created(1, "c"), assigned(1, "c", "w1", 0),
                            revoked(1, "c", "w2", 0)))
    assert state.owners[PartitionKey(FLOW, "t", 0)].worker_id == "w1"
    assert not state.revoking


def test_an_expired_worker_loses_everything_and_a_deleted_flow_its_partitions() -> None:
    state = replay(numbered(claim(1, "c"), created(1, "c"), assigned(1, "c", "w1", 0),
                            assigned(1, "c", "w2", 1), revoked(1, "c", "w2", 1),
                            control_pb2.ControlRecord(epoch=1, controller_id="c",
                                                      worker_expired=control_pb2.WorkerExpired(
                                                          worker_id="w2"))))
    assert state.workers() == {"w1"}
    state.apply(6, control_pb2.ControlRecord(epoch=1, controller_id="c",
                                             flow_deleted=control_pb2.FlowDeleted(flow=FLOW)))
    assert not state.flows and not state.owners and not state.workers()


def test_pause_resume_update_and_seeding() -> None:
    state = replay(numbered(claim(1, "c"), created(1, "c")))
    state.apply(2, control_pb2.ControlRecord(epoch=1, controller_id="c",
                                             flow_paused=control_pb2.FlowPaused(flow=FLOW)))
    assert state.flows[FLOW].paused and state.flows[FLOW].version == 2
    assert state.apply(3, control_pb2.ControlRecord(
        epoch=1, controller_id="c", flow_paused=control_pb2.FlowPaused(flow="x->y"))) \
        is Outcome.INVALID
    state.apply(4, control_pb2.ControlRecord(epoch=1, controller_id="c",
                                             flow_resumed=control_pb2.FlowResumed(flow=FLOW)))
    state.apply(5, control_pb2.ControlRecord(epoch=1, controller_id="c", flow_updated=(
        control_pb2.FlowUpdated(spec=flows_pb2.FlowSpec(source="a", target="b",
                                                        properties={"topics": "x"})))))
    state.apply(6, control_pb2.ControlRecord(epoch=1, controller_id="c",
                                             config_seeded=control_pb2.ConfigSeeded()))
    flow = state.flows[FLOW]
    assert (flow.paused, flow.properties, flow.version, state.seeded) == \
        (False, {"topics": "x"}, 5, True)


_records = st.lists(st.one_of(
    st.builds(claim, st.integers(0, 4), st.sampled_from(["c1", "c2"])),
    st.builds(created, st.integers(0, 4), st.sampled_from(["c1", "c2"]),
              st.sampled_from([".*", "x"])),
    st.builds(assigned, st.integers(0, 4), st.sampled_from(["c1", "c2"]),
              st.sampled_from(["w1", "w2"]), st.integers(0, 3)),
    st.builds(revoked, st.integers(0, 4), st.sampled_from(["c1", "c2"]),
              st.sampled_from(["w1", "w2"]), st.integers(0, 3)),
), max_size=40)


@given(_records)
def test_replay_is_deterministic_including_through_serialisation(
        records: list[control_pb2.ControlRecord]) -> None:
    once = replay(numbered(*records))
    wire = [control_pb2.ControlRecord.FromString(r.SerializeToString()) for r in records]
    assert replay(numbered(*wire)).snapshot() == once.snapshot()
    # A partition is never owned and revoking at once, and only flows that exist own any.
    assert not set(once.owners) & set(once.revoking)
    assert {k.flow for k in [*once.owners, *once.revoking]} <= set(once.flows)
