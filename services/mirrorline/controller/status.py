"""The status the Admin API reports: control-log state joined with the workers' reports."""

from __future__ import annotations

import time
from collections.abc import Mapping

from mirrorline.controller.discovery import Discoveries
from mirrorline.controller.lag import UnownedLag
from mirrorline.controller.workers import WorkerRegistry
from mirrorline.core.assignment import PartitionKey
from mirrorline.core.control import ControlState, FlowRecord
from mirrorline.core.reconcile import let_go
from mirrorline.v1 import admin_pb2, flows_pb2, spark_pb2


def partition_statuses(state: ControlState, registry: WorkerRegistry,
                       flow: str | None = None,
                       desired: Mapping[PartitionKey, str] | None = None,
                       measured: UnownedLag | None = None
                       ) -> list[flows_pb2.PartitionStatus]:
    """Every assigned (or moving) partition, as its owner last reported it, and every
    `desired` partition not assigned yet. A partition released and not `desired` any more
    (a narrowed filter) is done with, not shown. Partitions no live owner reports show
    the lag the controller `measured` for them."""
    reported = _reported(registry)
    out: list[flows_pb2.PartitionStatus] = []
    for key, remote, owner, moving in _rows(state, registry, desired):
        if flow and key.flow != flow:
            continue
        status = reported.get((key, owner)) if owner else None
        if status is None:
            status = flows_pb2.PartitionStatus(
                flow=key.flow, source_topic=key.topic, target_topic=remote,
                partition=key.partition, source_end_offset=-1, next_offset=-1, lag_records=-1,
                last_replication_latency_ms=-1, lag_ms=-1,
                state=flows_pb2.PARTITION_STATE_UNASSIGNED, worker_id=owner,
                error=("moving to another worker" if moving else
                       "" if owner else "not assigned to a worker yet"))
            found = measured.view(key) if measured is not None else None
            if found is not None:
                status.source_end_offset, status.next_offset = found.end, found.next_offset
                status.lag_records, status.lag_ms = found.lag.records, found.lag.ms
        out.append(status)
    return out


def unreported(state: ControlState, registry: WorkerRegistry,
               desired: Mapping[PartitionKey, str]) -> dict[PartitionKey, str]:
    """The partitions status shows that no live owner reports (key -> remote topic):
    the ones whose lag the controller measures itself (`controller/lag.py`)."""
    reported = _reported(registry)
    return {key: remote for key, remote, owner, _ in _rows(state, registry, desired)
            if not owner or (key, owner) not in reported}


def _reported(registry: WorkerRegistry
              ) -> dict[tuple[PartitionKey, str], flows_pb2.PartitionStatus]:
    reported: dict[tuple[PartitionKey, str], flows_pb2.PartitionStatus] = {}
    live = registry.live()
    for worker, view in registry.workers.items():
        if worker not in live:
            continue
        for p in view.shown:
            reported[(PartitionKey(p.flow, p.source_topic, p.partition), worker)] = p
    return reported


def _rows(state: ControlState, registry: WorkerRegistry,
          desired: Mapping[PartitionKey, str] | None
          ) -> list[tuple[PartitionKey, str, str, bool]]:
    """(key, remote topic, owner or "", moving) of every partition status shows."""
    gone = let_go(state, registry.reports(), desired) if desired is not None else set()
    rows: dict[PartitionKey, tuple[str, str, bool]] = {}
    for key, remote in (desired or {}).items():
        rows[key] = (remote, "", False)
    for key in {*state.owners, *(k for k in state.revoking if k not in gone)}:
        owner = state.owners.get(key) or state.revoking[key]
        rows[key] = (owner.remote_topic, owner.worker_id, key not in state.owners)
    return [(key, *rows[key]) for key in sorted(rows)]


def flow_summary(record: FlowRecord, partitions: list[flows_pb2.PartitionStatus],
                 discoveries: Discoveries) -> admin_pb2.FlowSummary:
    mine = [p for p in partitions if p.flow == record.name]
    problems = discoveries.problems(record.name)
    errors = [f"{p.source_topic}-{p.partition}: {p.error}" for p in mine
              if p.state == flows_pb2.PARTITION_STATE_ERROR]
    errors += [f"{topic}: {why}" for topic, why in sorted(problems.items())]
    if record.paused:
        state = flows_pb2.FLOW_STATE_PAUSED
    elif any(p.state == flows_pb2.PARTITION_STATE_ERROR for p in mine) or "*" in problems:
        state = flows_pb2.FLOW_STATE_ERROR
    elif mine and all(p.state == flows_pb2.PARTITION_STATE_RUNNING for p in mine):
        state = flows_pb2.FLOW_STATE_RUNNING
    else:
        state = flows_pb2.FLOW_STATE_STARTING
        if (not mine or any(not p.worker_id for p in mine)) and not errors:
            errors.append(_why_no_partitions(record, discoveries))
    return admin_pb2.FlowSummary(
        flow=record.name, state=state, error="; ".join(errors)[:2000], partitions=len(mine),
        lag_records=sum(p.lag_records for p in mine if p.lag_records > 0),
        max_lag_ms=max((p.lag_ms for p in mine), default=0.0),
        records_per_second=sum(p.records_per_second for p in mine),
        bytes_per_second=sum(p.bytes_per_second for p in mine))


def _why_no_partitions(record: FlowRecord, discoveries: Discoveries) -> str:
    """A flow starting with no partitions: say what it waits for (a reverse flow created by
    a failback typically waits for its topics to appear on the new primary)."""
    tracked = discoveries.flows.get(record.name)
    if tracked is None or tracked.result is None:
        return "waiting: the flow's topics are being discovered"
    if not tracked.result.topics:
        topics = record.properties.get("topics", ".*")
        return (f"waiting: no topic on {record.source} matches the flow's topic filter "
                f"(topics = {topics}); the flow starts when one appears")
    return "waiting: its partitions are not assigned yet (is a replicator worker running?)"


def report(state: ControlState, registry: WorkerRegistry, discoveries: Discoveries, *,
           controller_id: str, flow: str | None = None,
           measured: UnownedLag | None = None) -> admin_pb2.StatusReport:
    partitions = partition_statuses(state, registry, flow, discoveries.desired(), measured)
    flows = [flow_summary(r, partitions, discoveries) for name, r in sorted(state.flows.items())
             if not flow or name == flow]
    live = registry.live()
    problems = [spark_pb2.SparkExecutorProblem(executor_id=w, problem=v.problem)
                for w, v in sorted(registry.workers.items())
                if w in live and v.kind == "spark" and v.problem]
    return admin_pb2.StatusReport(generated_at_ms=int(time.time() * 1000), flows=flows,
                                  partitions=partitions, controller_id=controller_id,
                                  epoch=state.epoch, spark_problems=problems)


def flow_message(record: FlowRecord, summary: admin_pb2.FlowSummary) -> admin_pb2.Flow:
    return admin_pb2.Flow(name=record.name, spec=record.spec(), paused=record.paused,
                          state=summary.state, error=summary.error,
                          partitions=summary.partitions, version=record.version)


def workers(state: ControlState, registry: WorkerRegistry) -> admin_pb2.ListWorkersResponse:
    live = registry.live()
    out = admin_pb2.ListWorkersResponse()
    for worker_id in sorted(set(registry.workers) | state.workers()):
        view = registry.workers.get(worker_id)
        assigned = sorted(k for k, o in state.owners.items() if o.worker_id == worker_id)
        out.workers.add(
            worker_id=worker_id, address=view.address if view else "",
            alive=worker_id in live,
            last_heartbeat_ms=view.last_seen_ms if view else 0,
            lease_expires_ms=(view.last_seen_ms + int(registry.lease_s * 1000)) if view else 0,
            bytes_per_second=sum(p.bytes_per_second for p in view.shown) if view else 0.0,
            records_per_second=sum(p.records_per_second for p in view.shown)
            if view else 0.0,
            partitions=[admin_pb2.AssignedPartition(flow=k.flow, topic=k.topic,
                                                    partition=k.partition) for k in assigned],
            kind=view.kind if view else "", ui_address=view.ui_address if view else "",
            problem=view.problem if view else "")
    return out


#: The states the controller's state metrics report, each from 0 (a series that appears
#: only once non-zero shows no change to a dashboard): lower-case protobuf names.
PARTITION_STATES = ("starting", "running", "paused", "error", "unassigned")
FLOW_STATES = ("starting", "running", "paused", "error")


def state_counts(report: admin_pb2.StatusReport
                 ) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """(flows per state, partitions per (flow, state)) of a status report, every state of
    every flow of the report present, 0 when nothing is in it."""
    flows = dict.fromkeys(FLOW_STATES, 0)
    partitions = {(f.flow, s): 0 for f in report.flows for s in PARTITION_STATES}
    for f in report.flows:
        name = flows_pb2.FlowState.Name(f.state).removeprefix("FLOW_STATE_").lower()
        if name in flows:
            flows[name] += 1
    for p in report.partitions:
        name = flows_pb2.PartitionState.Name(p.state).removeprefix("PARTITION_STATE_").lower()
        if (p.flow, name) in partitions:
            partitions[(p.flow, name)] += 1
    return flows, partitions
