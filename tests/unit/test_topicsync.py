"""Topic-config and partition planning (MM2's syncTopicConfigs): what the config-sync service
would change on a remote topic, and what it reports but leaves alone."""

from __future__ import annotations

import pytest

from mirrorline.core.filters import (
    ConfigEntry,
    ConfigOp,
    ConfigPropertyFilter,
    ConfigSource,
    config_sync_ops,
)
from mirrorline.core.topicsync import (
    ConfigAction,
    PartitionAction,
    normalize_description,
    plan_partitions,
    plan_topic_configs,
)

D = ConfigSource.DEFAULT_CONFIG
T = ConfigSource.DYNAMIC_TOPIC_CONFIG


def kafka(overrides: dict[str, str], defaults: dict[str, str] | None = None
          ) -> list[ConfigEntry]:
    """A Kafka-style description: every topic config, overrides flagged as such."""
    base = {"cleanup.policy": "delete", "retention.ms": "604800000",
            "retention.bytes": "-1", "delete.retention.ms": "86400000",
            "min.insync.replicas": "1", **(defaults or {})}
    out = [ConfigEntry(k, v, D) for k, v in base.items() if k not in overrides]
    out += [ConfigEntry(k, v, T) for k, v in overrides.items()]
    return out


def changes(actions: list[ConfigAction]) -> dict[str, tuple[str, str | None]]:
    return {a.key: (a.action, a.source_value if a.action == "set" else None)
            for a in actions if a.changes}


def test_pinned_filter_cases_in_the_plan() -> None:
    """MM2's unit case: explicit `name-1` is SET, default `name-2` DELETEs a target
    override, `min.insync.replicas` is never touched (excluded by default)."""
    source = [ConfigEntry("name-1", "value-1", T), ConfigEntry("name-2", "value-2", D),
              ConfigEntry("min.insync.replicas", "2", T),
              ConfigEntry("cleanup.policy", "delete", D), ConfigEntry("retention.ms", "1", D)]
    target = [ConfigEntry("name-1", "old", T), ConfigEntry("name-2", "override", T),
              ConfigEntry("min.insync.replicas", "1", D),
              ConfigEntry("cleanup.policy", "delete", D), ConfigEntry("retention.ms", "1", D)]
    plan = plan_topic_configs(source, target, ConfigPropertyFilter())
    assert changes(plan) == {"name-1": ("set", "value-1"), "name-2": ("delete", None)}
    excluded = [a for a in plan if a.key == "min.insync.replicas"]
    assert excluded == [ConfigAction("min.insync.replicas", "2", "1", "none",
                                     "excluded (config.properties.exclude)")]


def test_use_defaults_from_source_sets_the_source_default() -> None:
    source = kafka({}, {"name-2": "value-2"})
    target = kafka({"name-2": "override"})
    plan = plan_topic_configs(source, target, ConfigPropertyFilter(use_defaults_from="source"))
    assert changes(plan) == {"name-2": ("set", "value-2")}


def test_mm2_integration_scenario_as_a_plan() -> None:
    """MM2's topic-config integration case: with delete.retention.* excluded, an override of
    retention.bytes on the remote topic is restored, delete.retention.ms=2000 stays; once
    the source drops its retention.bytes override, the remote topic's is deleted."""
    flt = ConfigPropertyFilter((r"delete\.retention\..*",))
    source = kafka({"delete.retention.ms": "1000", "retention.bytes": "1000"})
    target = kafka({"delete.retention.ms": "2000", "retention.bytes": "2000"})
    plan = plan_topic_configs(source, target, flt)
    assert changes(plan) == {"retention.bytes": ("set", "1000")}
    assert [(a.key, a.action) for a in plan if not a.changes] == [
        ("delete.retention.ms", "none")]
    after_source_change = kafka({"delete.retention.ms": "1000"})
    plan = plan_topic_configs(after_source_change, kafka({"retention.bytes": "1000"}), flt)
    assert changes(plan) == {"retention.bytes": ("delete", None)}


def test_identical_sides_have_no_drift() -> None:
    both = kafka({"retention.ms": "1000"})
    assert plan_topic_configs(both, both, ConfigPropertyFilter()) == []


def test_a_target_default_equal_to_the_source_value_is_not_drift() -> None:
    source = kafka({"retention.ms": "604800000"})
    assert plan_topic_configs(source, kafka({}), ConfigPropertyFilter()) == []


def test_read_only_sensitive_and_static_values_are_reported_never_changed() -> None:
    source = [*kafka({}), ConfigEntry("ro", "1", T, read_only=True),
              ConfigEntry("secret", "a", T, sensitive=True),
              ConfigEntry("static", "x", ConfigSource.STATIC_BROKER_CONFIG)]
    target = [*kafka({}), ConfigEntry("ro", "2", T, read_only=True),
              ConfigEntry("secret", "b", T, sensitive=True),
              ConfigEntry("static", "y", ConfigSource.STATIC_BROKER_CONFIG)]
    plan = plan_topic_configs(source, target, ConfigPropertyFilter())
    assert {(a.key, a.action, a.reason) for a in plan} == {
        ("ro", "none", "read-only"), ("secret", "none", "sensitive"),
        ("static", "none", "static broker config")}


def test_unavailable_keeps_the_drift_visible_and_changes_nothing() -> None:
    why = "unavailable on backup: the broker does not implement IncrementalAlterConfigs"
    plan = plan_topic_configs(kafka({"retention.ms": "5"}), kafka({}), ConfigPropertyFilter(),
                              unavailable=why)
    assert plan == [ConfigAction("retention.ms", "5", "604800000", "none", why)]


def test_every_planned_change_is_an_operation_mm2_would_send() -> None:
    """Sending only the changes leaves the target as MM2's full op list would."""
    flt = ConfigPropertyFilter()
    source = kafka({"retention.ms": "5", "cleanup.policy": "compact"})
    target = kafka({"retention.ms": "6", "retention.bytes": "7"})
    mm2 = set(config_sync_ops(source, flt))
    for action in plan_topic_configs(source, target, flt):
        if action.changes:
            op = ConfigOp(action.key, "set", action.source_value) if action.action == "set" \
                else ConfigOp(action.key, "delete", None)
            assert op in mm2


# -- brokers that list only overrides (Tansu 0.6) ---------------------------------------


def test_partial_descriptions_are_read_as_overrides() -> None:
    partial = [ConfigEntry("retention.ms", "1000", D)]
    assert normalize_description(partial) == [ConfigEntry("retention.ms", "1000", T)]
    full = kafka({})
    assert normalize_description(full) == full


def test_hand_set_override_on_a_partial_target_is_deleted() -> None:
    """A source without overrides (empty description) and a remote topic with a hand-set
    override: the source uses its default, so the override is deleted."""
    plan = plan_topic_configs([], [ConfigEntry("retention.ms", "12345", D)],
                              ConfigPropertyFilter())
    assert plan == [ConfigAction("retention.ms", None, "12345", "delete")]


def test_partial_source_overrides_are_set_on_the_target() -> None:
    plan = plan_topic_configs([ConfigEntry("segment.bytes", "100000", D)], [],
                              ConfigPropertyFilter())
    assert changes(plan) == {"segment.bytes": ("set", "100000")}


def test_excluded_hand_set_override_on_partial_target_is_only_reported() -> None:
    plan = plan_topic_configs([], [ConfigEntry("min.insync.replicas", "2", D)],
                              ConfigPropertyFilter())
    assert [(a.action, a.reason) for a in plan] == [
        ("none", "excluded (config.properties.exclude)")]


# -- partitions ---------------------------------------------------------------------------


def test_partition_counts() -> None:
    assert plan_partitions(3, 3) is None
    assert plan_partitions(5, 3) == PartitionAction(5, 3, "grow")
    more = plan_partitions(3, 5)
    assert more is not None and more.action == "none" and "never removed" in more.reason
    off = plan_partitions(5, 3, unavailable="unavailable on backup: no CreatePartitions")
    assert off == PartitionAction(5, 3, "none", "unavailable on backup: no CreatePartitions")


@pytest.mark.parametrize("source", [ConfigSource.STATIC_BROKER_CONFIG,
                                    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                                    ConfigSource.DYNAMIC_BROKER_CONFIG])
def test_a_target_broker_default_is_not_an_override_to_delete(source: ConfigSource) -> None:
    """The source uses its default, the target's broker sets another default: a DELETE
    would change nothing, so it is not planned (the plan converges)."""
    target = [e for e in kafka({}) if e.name != "retention.ms"]
    target.append(ConfigEntry("retention.ms", "1000", source))
    assert plan_topic_configs(kafka({}), target, ConfigPropertyFilter()) == []
