"""A drift plan: every difference between a flow's source and target that the sync would
act on or cannot act on, built from what both clusters described. Pure.

The same plan is what `mirrorline admin drift` shows, what `sync.mode = plan` reports and
what a sync round (or `drift apply`) executes, so what an operator reviewed is what runs.
Applied changes are recorded as `HistoryEntry` values (who, what, when) in the flow's
history topic on the target.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from mirrorline.core.aclsync import AclBinding, AclPlan
from mirrorline.core.filters import ConfigEntry, ConfigPropertyFilter
from mirrorline.core.topicsync import (
    ConfigAction,
    PartitionAction,
    plan_partitions,
    plan_topic_configs,
)


@dataclass(frozen=True)
class TopicDrift:
    source_topic: str
    remote_topic: str
    configs: tuple[ConfigAction, ...] = ()
    partitions: PartitionAction | None = None
    #: Why this topic could not be compared (vanished source, unreadable configs...).
    problem: str = ""

    @property
    def changes(self) -> int:
        """How many changes applying the plan makes to this topic."""
        grow = self.partitions is not None and self.partitions.action == "grow"
        return sum(1 for c in self.configs if c.changes) + int(grow)

    @property
    def differs(self) -> bool:
        return bool(self.configs or self.partitions or self.problem)


@dataclass(frozen=True)
class DriftPlan:
    flow: str
    generated_at_ms: int
    topics: tuple[TopicDrift, ...] = ()
    acls_add: tuple[AclBinding, ...] = ()
    acls_remove: tuple[AclBinding, ...] = ()
    #: Feature ("configs", "partitions", "acls") -> "unavailable on <cluster>: <why>",
    #: or "disabled (<key> = false)".
    unavailable: Mapping[str, str] = field(default_factory=dict)

    @property
    def changes(self) -> int:
        return (sum(t.changes for t in self.topics) + len(self.acls_add)
                + len(self.acls_remove))

    @property
    def differences(self) -> int:
        """Everything shown: changes plus differences the sync leaves alone."""
        return (sum(len(t.configs) + (t.partitions is not None) + bool(t.problem)
                    for t in self.topics) + len(self.acls_add) + len(self.acls_remove))


@dataclass(frozen=True)
class TopicSides:
    """What was described for one replicated topic (None: that side is missing)."""

    source_topic: str
    remote_topic: str
    source_partitions: int | None
    target_partitions: int | None
    source_configs: Sequence[ConfigEntry] | None
    target_configs: Sequence[ConfigEntry] | None


def topic_drift(sides: TopicSides, flt: ConfigPropertyFilter, *,
                configs_unavailable: str | None = None,
                partitions_unavailable: str | None = None,
                sync_configs: bool = True) -> TopicDrift:
    """Drift of one topic; a vanished source topic is reported and its remote left alone."""
    name, remote = sides.source_topic, sides.remote_topic
    if sides.source_partitions is None:
        return TopicDrift(name, remote, problem=(
            f"source topic {name!r} no longer exists; remote topic {remote!r} is left "
            "as it is"))
    if sides.target_partitions is None:
        return TopicDrift(name, remote, problem=(
            f"remote topic {remote!r} does not exist yet (the replicator creates it)"))
    partitions = plan_partitions(sides.source_partitions, sides.target_partitions,
                                 unavailable=partitions_unavailable)
    problem = ""
    configs: list[ConfigAction] = []
    if not sync_configs:
        pass
    elif sides.source_configs is None or sides.target_configs is None:
        side = "source" if sides.source_configs is None else "target"
        problem = f"cannot read the {side} topic's configs"
    else:
        configs = plan_topic_configs(sides.source_configs, sides.target_configs, flt,
                                     unavailable=configs_unavailable)
    return TopicDrift(name, remote, tuple(configs), partitions, problem)


def build_plan(flow: str, now_ms: int, topics: Sequence[TopicDrift],
               acls: AclPlan | None, unavailable: Mapping[str, str]) -> DriftPlan:
    """The flow's plan: only topics that differ, sorted by name."""
    differing = tuple(sorted((t for t in topics if t.differs), key=lambda t: t.source_topic))
    return DriftPlan(flow, now_ms, differing,
                     acls.add if acls is not None else (),
                     acls.remove if acls is not None else (), dict(unavailable))


@dataclass(frozen=True)
class HistoryEntry:
    """One applied change: when, by whom (the service, or the operator's request), what."""

    at_ms: int
    flow: str
    who: str
    #: "config", "partitions", "acl-add", "acl-remove".
    kind: str
    subject: str
    detail: str
    ok: bool = True
    error: str = ""

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> HistoryEntry:
        raw = json.loads(data)
        if not isinstance(raw, dict):
            raise ValueError("a history record must be a JSON object")
        return cls(at_ms=int(raw["at_ms"]), flow=str(raw["flow"]), who=str(raw["who"]),
                   kind=str(raw["kind"]), subject=str(raw["subject"]),
                   detail=str(raw["detail"]), ok=bool(raw.get("ok", True)),
                   error=str(raw.get("error", "")))


#: The history kind of a "drift detected" event (`sync.mode = plan`).
DRIFT_DETECTED = "drift"


def drift_summary(plan: DriftPlan) -> tuple[str, ...]:
    """One line per difference (topic, key, source value, target value, action), sorted,
    without anything that moves by itself (time), so equal drift gives equal lines."""
    def value(v: str | None) -> str:
        return "(default)" if v is None else v

    lines: list[str] = []
    for t in plan.topics:
        if t.problem:
            lines.append(f"{t.remote_topic}: {t.problem}")
        for c in t.configs:
            why = f" ({c.reason})" if c.reason else ""
            lines.append(f"{t.remote_topic} {c.key}: source {value(c.source_value)}, "
                         f"target {value(c.target_value)} -> {c.action}{why}")
        if t.partitions is not None:
            p = t.partitions
            why = f" ({p.reason})" if p.reason else ""
            lines.append(f"{t.remote_topic} partitions: source {p.source}, target "
                         f"{p.target} -> {p.action}{why}")
    lines += [f"ACL {b} -> add" for b in plan.acls_add]
    lines += [f"ACL {b} -> remove" for b in plan.acls_remove]
    return tuple(sorted(lines))


def drift_event(plan: DriftPlan, history: Sequence[HistoryEntry],
                who: str = "configsync") -> HistoryEntry | None:
    """The "drift detected" entry to record for `plan`, or None when there is nothing new.

    New means: the plan has differences, and they are not the ones of the flow's last
    recorded drift event -- unless a change was applied since that event (the drift was
    fixed and came back). Decided from the recorded history alone, so steady drift and
    restarts (the history is read back at start) add nothing.
    """
    lines = drift_summary(plan)
    if not lines:
        return None
    detail = "; ".join(lines)
    for entry in reversed(history):
        if entry.flow != plan.flow:
            continue
        if entry.kind != DRIFT_DETECTED:
            break  # a change was applied after the last event: drift is new again
        if entry.detail == detail:
            return None
        break
    return HistoryEntry(plan.generated_at_ms, plan.flow, who, DRIFT_DETECTED,
                        f"{len(lines)} difference(s) detected", detail)
