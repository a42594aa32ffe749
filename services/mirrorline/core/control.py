"""The control plane's state, rebuilt by replaying the control log (pure, no I/O).

Every service derives what it must do from the same ordered events, so replay must be
deterministic: the same records always give the same state, whoever reads them and
whenever.

Fencing lives here, not in any broker feature. Each record carries the epoch of the
controller that wrote it. The first `LeaderClaimed` for epoch N+1 makes its writer the
leader; every other record counts only if it carries the current epoch and comes from
the current leader. A deposed controller can still append bytes, but its records change
nothing for any reader, and it learns it was deposed by reading its own append back.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mirrorline.core.assignment import PartitionKey
from mirrorline.v1 import audit_pb2, control_pb2, flows_pb2

#: Audit entries kept in memory (older ones stay in the control log until retention).
AUDIT_KEPT = 10_000


class Outcome(enum.Enum):
    APPLIED = "applied"
    #: Written by a controller that is not (or no longer) the leader.
    STALE = "stale epoch"
    #: Consistent epoch, but the event does not fit the state (e.g. a flow that exists).
    INVALID = "invalid"


@dataclass
class FlowRecord:
    name: str
    source: str
    target: str
    properties: dict[str, str]
    paused: bool = False
    created_offset: int = -1
    version: int = -1

    def spec(self) -> flows_pb2.FlowSpec:
        return flows_pb2.FlowSpec(source=self.source, target=self.target,
                                  properties=dict(self.properties))


@dataclass(frozen=True)
class Ownership:
    worker_id: str
    remote_topic: str
    #: Offset of the record that gave (or took away) this partition.
    offset: int


@dataclass
class ControlState:
    epoch: int = 0
    leader_id: str | None = None
    leader_address: str | None = None
    flows: dict[str, FlowRecord] = field(default_factory=dict)
    #: Who copies each partition now.
    owners: dict[PartitionKey, Ownership] = field(default_factory=dict)
    #: Partitions taken away from a worker that has not confirmed the release yet.
    revoking: dict[PartitionKey, Ownership] = field(default_factory=dict)
    seeded: bool = False
    applied_offset: int = -1
    rejected: int = 0
    #: The newest audit entries, oldest first.
    audit: deque[audit_pb2.AuditEntry] = field(
        default_factory=lambda: deque(maxlen=AUDIT_KEPT))

    # -- replay -----------------------------------------------------------------------
    def apply(self, offset: int, record: control_pb2.ControlRecord) -> Outcome:
        """Fold one record in; records must be applied in log order, each exactly once."""
        self.applied_offset = offset
        kind = record.WhichOneof("event")
        if kind == "leader_claimed":
            if record.epoch != self.epoch + 1:
                self.rejected += 1
                return Outcome.STALE
            self.epoch = record.epoch
            self.leader_id = record.controller_id
            self.leader_address = record.leader_claimed.address
            return Outcome.APPLIED
        if self.epoch == 0 or record.epoch != self.epoch or record.controller_id != self.leader_id:
            self.rejected += 1
            return Outcome.STALE
        handler = getattr(self, f"_on_{kind}", None) if kind is not None else None
        if handler is None or kind is None:  # an event this version does not know: skip it
            self.rejected += 1
            return Outcome.INVALID
        outcome: Outcome = handler(offset, getattr(record, kind))
        return outcome

    def _on_audit(self, offset: int, event: audit_pb2.AuditEntry) -> Outcome:
        entry = audit_pb2.AuditEntry()
        entry.CopyFrom(event)
        entry.offset = offset
        self.audit.append(entry)
        return Outcome.APPLIED

    def _on_flow_created(self, offset: int, event: control_pb2.FlowCreated) -> Outcome:
        spec = event.spec
        name = flow_name(spec.source, spec.target)
        if name in self.flows:
            return Outcome.INVALID
        self.flows[name] = FlowRecord(name, spec.source, spec.target, dict(spec.properties),
                                      created_offset=offset, version=offset)
        return Outcome.APPLIED

    def _on_flow_updated(self, offset: int, event: control_pb2.FlowUpdated) -> Outcome:
        name = flow_name(event.spec.source, event.spec.target)
        flow = self.flows.get(name)
        if flow is None:
            return Outcome.INVALID
        flow.properties = dict(event.spec.properties)
        flow.version = offset
        return Outcome.APPLIED

    def _on_flow_paused(self, offset: int, event: control_pb2.FlowPaused) -> Outcome:
        return self._set_paused(offset, event.flow, True)

    def _on_flow_resumed(self, offset: int, event: control_pb2.FlowResumed) -> Outcome:
        return self._set_paused(offset, event.flow, False)

    def _set_paused(self, offset: int, name: str, paused: bool) -> Outcome:
        flow = self.flows.get(name)
        if flow is None:
            return Outcome.INVALID
        flow.paused = paused
        flow.version = offset
        return Outcome.APPLIED

    def _on_flow_deleted(self, offset: int, event: control_pb2.FlowDeleted) -> Outcome:
        if self.flows.pop(event.flow, None) is None:
            return Outcome.INVALID
        for table in (self.owners, self.revoking):
            for key in [k for k in table if k.flow == event.flow]:
                del table[key]
        return Outcome.APPLIED

    def _on_partitions_assigned(self, offset: int,
                                event: control_pb2.PartitionsAssigned) -> Outcome:
        if event.flow not in self.flows:
            return Outcome.INVALID
        for ref in event.partitions:
            key = PartitionKey(event.flow, ref.topic, ref.partition)
            self.revoking.pop(key, None)
            self.owners[key] = Ownership(event.worker_id, ref.remote_topic, offset)
        return Outcome.APPLIED

    def _on_partitions_revoked(self, offset: int,
                               event: control_pb2.PartitionsRevoked) -> Outcome:
        for ref in event.partitions:
            key = PartitionKey(event.flow, ref.topic, ref.partition)
            owner = self.owners.get(key)
            if owner is not None and owner.worker_id == event.worker_id:
                del self.owners[key]
                self.revoking[key] = Ownership(event.worker_id, owner.remote_topic, offset)
        return Outcome.APPLIED

    def _on_worker_expired(self, offset: int, event: control_pb2.WorkerExpired) -> Outcome:
        for table in (self.owners, self.revoking):
            for key in [k for k, o in table.items() if o.worker_id == event.worker_id]:
                del table[key]
        return Outcome.APPLIED

    def _on_config_seeded(self, offset: int, event: control_pb2.ConfigSeeded) -> Outcome:
        self.seeded = True
        return Outcome.APPLIED

    # -- questions ----------------------------------------------------------------------
    def owned_by(self, worker_id: str) -> dict[PartitionKey, str]:
        """The partitions `worker_id` must copy now (key -> remote topic)."""
        return {k: o.remote_topic for k, o in self.owners.items() if o.worker_id == worker_id}

    def workers(self) -> set[str]:
        return {o.worker_id for o in (*self.owners.values(), *self.revoking.values())}

    def snapshot(self) -> dict[str, object]:
        """A canonical, comparable view of the whole state (for tests and diagnostics)."""
        return {
            "epoch": self.epoch,
            "leader": (self.leader_id, self.leader_address),
            "seeded": self.seeded,
            "flows": {n: (f.source, f.target, sorted(f.properties.items()), f.paused,
                          f.version) for n, f in sorted(self.flows.items())},
            "owners": sorted((k, o.worker_id, o.remote_topic) for k, o in self.owners.items()),
            "revoking": sorted((k, o.worker_id) for k, o in self.revoking.items()),
        }


def flow_name(source: str, target: str) -> str:
    return f"{source}->{target}"


def replay(records: Iterable[tuple[int, control_pb2.ControlRecord]]) -> ControlState:
    state = ControlState()
    for offset, record in records:
        state.apply(offset, record)
    return state


def partition_refs(keys: Mapping[PartitionKey, str]) -> list[control_pb2.PartitionRef]:
    return [control_pb2.PartitionRef(topic=k.topic, partition=k.partition, remote_topic=remote)
            for k, remote in sorted(keys.items())]
