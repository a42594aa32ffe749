"""The controller's worker registry forgets silent workers and cannot be flooded."""

from __future__ import annotations

from mirrorline.controller import workers
from mirrorline.controller.workers import WorkerRegistry
from mirrorline.v1 import coordinator_pb2


def beat(worker_id: str) -> coordinator_pb2.WorkerHeartbeat:
    return coordinator_pb2.WorkerHeartbeat(worker_id=worker_id, address="127.0.0.1:1")


def test_a_worker_silent_for_its_lease_plus_the_grace_is_forgotten() -> None:
    registry = WorkerRegistry(lease_ms=6000)
    assert registry.heartbeat(beat("w1")) and registry.heartbeat(beat("w2"))
    # w1 was last heard from just within lease + grace, w2 just beyond it.
    registry.workers["w1"].last_seen -= 6 + workers.PRUNE_GRACE_S - 1
    registry.workers["w2"].last_seen -= 6 + workers.PRUNE_GRACE_S + 1
    assert registry.live() == set()
    assert set(registry.workers) == {"w1"}  # shown as not alive until it is pruned


def test_invented_worker_ids_cannot_grow_the_registry_without_bound() -> None:
    registry = WorkerRegistry(lease_ms=6000)
    for i in range(workers.MAX_WORKERS):
        assert registry.heartbeat(beat(f"fake-{i}"))
    assert not registry.heartbeat(beat("one-more"))
    assert registry.heartbeat(beat("fake-0"))  # a known worker still renews its lease
    assert len(registry.workers) == workers.MAX_WORKERS
