"""Drift plans and history entries (core dataclasses) as `drift.proto` messages."""

from __future__ import annotations

from mirrorline.core.aclsync import AclBinding
from mirrorline.core.drift import DriftPlan, HistoryEntry
from mirrorline.v1 import drift_pb2


def acl_message(binding: AclBinding) -> drift_pb2.AclEntry:
    return drift_pb2.AclEntry(resource_type=binding.resource_type, name=binding.name,
                              pattern=binding.pattern, principal=binding.principal,
                              host=binding.host, operation=binding.operation,
                              permission=binding.permission)


def plan_message(plan: DriftPlan, *, mode: str, error: str = "",
                 last_sync_ms: int = 0) -> drift_pb2.DriftPlan:
    out = drift_pb2.DriftPlan(flow=plan.flow, generated_at_ms=plan.generated_at_ms,
                              unavailable=dict(plan.unavailable), mode=mode,
                              changes=plan.changes, error=error, last_sync_ms=last_sync_ms)
    for topic in plan.topics:
        message = out.topics.add(source_topic=topic.source_topic,
                                 remote_topic=topic.remote_topic, problem=topic.problem)
        for c in topic.configs:
            message.configs.add(key=c.key, source_value=c.source_value or "",
                                source_present=c.source_value is not None,
                                target_value=c.target_value or "",
                                target_present=c.target_value is not None,
                                action=c.action, reason=c.reason)
        if topic.partitions is not None:
            p = topic.partitions
            message.partitions.CopyFrom(drift_pb2.PartitionDrift(
                source_partitions=p.source, target_partitions=p.target, action=p.action,
                reason=p.reason))
    out.acls_add.extend(acl_message(b) for b in plan.acls_add)
    out.acls_remove.extend(acl_message(b) for b in plan.acls_remove)
    return out


def history_message(entry: HistoryEntry) -> drift_pb2.HistoryEntry:
    return drift_pb2.HistoryEntry(at_ms=entry.at_ms, who=entry.who, kind=entry.kind,
                                  subject=entry.subject, detail=entry.detail, ok=entry.ok,
                                  error=entry.error)
