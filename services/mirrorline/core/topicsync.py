"""What keeps a remote topic in step with its source after creation: configs and partitions.

Pure planning, no I/O: the config-sync service describes both sides, asks these functions
what differs and what the sync would do about it, and the same answer is shown to an
operator as a drift plan (`mirrorline admin drift`) and applied by the sync round. One
function decides, so a plan never promises what a round would not do.

Config semantics are MM2's periodic sync (syncTopicConfigs): read-only, sensitive, static-broker
and excluded properties are never touched; a source value that is not the source's default
is SET on the remote topic; where the source uses its default, the remote topic's override
is DELETEd so it falls back to the target's default (with `use.defaults.from = source` the
source's default value is SET instead). MM2 sends every operation every round; we send only
those that change something, which leaves the target in the same state.

One robustness rule is our own (`normalize_description`): a broker whose DescribeConfigs
answer leaves out configs every Kafka topic has (Tansu 0.6 lists only the keys set on the
topic, each flagged DEFAULT_CONFIG) has in effect told us which keys are overrides; the
listed keys are then treated as overrides. Kafka always lists every topic config, so on
Kafka the rule never applies.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from mirrorline.core.filters import ConfigEntry, ConfigPropertyFilter, ConfigSource

#: Configs every Kafka broker reports for every topic (without a key filter).
ALWAYS_DESCRIBED: Final = frozenset({"cleanup.policy", "retention.ms"})

ConfigActionKind = Literal["set", "delete", "none"]


@dataclass(frozen=True)
class ConfigAction:
    """One config key of one remote topic: both values, and what the sync does about it."""

    key: str
    source_value: str | None
    target_value: str | None
    action: ConfigActionKind
    #: Why `none` (excluded, read-only, unavailable on <cluster>: ...); empty otherwise.
    reason: str = ""

    @property
    def changes(self) -> bool:
        return self.action != "none"


@dataclass(frozen=True)
class PartitionAction:
    """Partition counts of a source topic and its remote topic."""

    source: int
    target: int
    action: Literal["grow", "none"]
    reason: str = ""


def normalize_description(entries: Sequence[ConfigEntry]) -> list[ConfigEntry]:
    """Entries as Kafka would report them (see the module docstring).

    A partial answer -- one that omits a config every Kafka topic has -- only lists
    overrides, so each listed entry flagged as a default is re-flagged as a topic override.
    """
    names = {e.name for e in entries}
    if not entries or names >= ALWAYS_DESCRIBED:
        return list(entries)
    return [ConfigEntry(e.name, e.value, ConfigSource.DYNAMIC_TOPIC_CONFIG, e.read_only,
                        e.sensitive) if e.is_default else e for e in entries]


def _overridden(entry: ConfigEntry | None) -> bool:
    """Whether the topic itself overrides this config (what a DELETE would remove).

    A value from the broker's configuration (static or dynamic broker default) is not a
    topic override: deleting it would change nothing and the plan would never converge.
    """
    return entry is not None and entry.source is ConfigSource.DYNAMIC_TOPIC_CONFIG


def _skip_reason(entry: ConfigEntry, flt: ConfigPropertyFilter) -> str | None:
    if entry.read_only:
        return "read-only"
    if entry.sensitive:
        return "sensitive"
    if entry.source is ConfigSource.STATIC_BROKER_CONFIG:
        return "static broker config"
    if not flt.should_replicate_config_property(entry.name):
        return "excluded (config.properties.exclude)"
    return None


def plan_topic_configs(source: Iterable[ConfigEntry], target: Iterable[ConfigEntry],
                       flt: ConfigPropertyFilter, *,
                       unavailable: str | None = None) -> list[ConfigAction]:
    """Every key whose values differ or that the sync would change, sorted by key.

    `unavailable` (e.g. "unavailable on backup: no IncrementalAlterConfigs") turns every
    action into `none` with that reason: the plan still shows the drift.
    """
    src = {e.name: e for e in normalize_description(list(source))}
    tgt = {e.name: e for e in normalize_description(list(target))}
    actions: list[ConfigAction] = []
    for key in sorted(src.keys() | tgt.keys()):
        s, t = src.get(key), tgt.get(key)
        s_value = s.value if s is not None else None
        t_value = t.value if t is not None else None
        reason = _skip_reason(s if s is not None else t, flt)  # type: ignore[arg-type]
        if reason is not None:
            if s_value != t_value:
                actions.append(ConfigAction(key, s_value, t_value, "none", reason))
            continue
        action: ConfigActionKind = "none"
        why = ""
        source_default = s is None or s.is_default
        if source_default and not flt.should_replicate_source_default(key):
            if _overridden(t):
                action = "delete"
        elif s is None:
            if _overridden(t):
                why = "the source does not report this key; left as it is"
        elif s_value is None:
            if s_value != t_value:
                why = "the source reports no value"
        elif s_value != t_value:
            action = "set"
        if action == "none" and not why:
            continue
        if action != "none" and unavailable:
            action, why = "none", unavailable
        actions.append(ConfigAction(key, s_value, t_value, action, why))
    return actions


def plan_partitions(source: int, target: int, *, unavailable: str | None = None
                    ) -> PartitionAction | None:
    """None when the counts agree. Partitions are only ever added, never removed."""
    if source == target:
        return None
    if target > source:
        return PartitionAction(source, target, "none",
                               f"the remote topic has {target - source} more partitions than "
                               "its source; partitions are never removed")
    if unavailable:
        return PartitionAction(source, target, "none", unavailable)
    return PartitionAction(source, target, "grow")
