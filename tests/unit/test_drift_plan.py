"""The drift-plan builder, its rendering by `mirrorline admin drift`, the history record
format, and the configuration keys of the config-sync service."""

from __future__ import annotations

import pytest

from mirrorline.cli import main
from mirrorline.cli.admin_drift import format_drift_plan, format_history
from mirrorline.configsync.convert import history_message, plan_message
from mirrorline.core.aclsync import AclBinding, AclPlan
from mirrorline.core.config import parse_config
from mirrorline.core.drift import (
    DRIFT_DETECTED,
    DriftPlan,
    HistoryEntry,
    TopicSides,
    build_plan,
    drift_event,
    topic_drift,
)
from mirrorline.core.errors import ConfigError
from mirrorline.core.filters import ConfigEntry, ConfigPropertyFilter, ConfigSource

T = ConfigSource.DYNAMIC_TOPIC_CONFIG
D = ConfigSource.DEFAULT_CONFIG
FLT = ConfigPropertyFilter()


def sides(name: str, source_parts: int | None, target_parts: int | None,
          source: list[ConfigEntry] | None = None,
          target: list[ConfigEntry] | None = None) -> TopicSides:
    return TopicSides(name, f"primary.{name}", source_parts, target_parts,
                      [] if source is None else source, [] if target is None else target)


def test_topic_with_config_and_partition_drift() -> None:
    drift = topic_drift(sides("orders", 6, 3, [ConfigEntry("retention.ms", "1", T)], []),
                        FLT)
    assert drift.changes == 2
    assert [(c.key, c.action) for c in drift.configs] == [("retention.ms", "set")]
    assert drift.partitions is not None and drift.partitions.action == "grow"


def test_vanished_source_topic_is_reported_and_left_alone() -> None:
    drift = topic_drift(sides("gone", None, 3), FLT)
    assert drift.changes == 0
    assert "no longer exists" in drift.problem and "left as it is" in drift.problem


def test_unreadable_configs_are_a_problem_for_that_topic_only() -> None:
    drift = topic_drift(TopicSides("t", "primary.t", 1, 1, None, []), FLT)
    assert drift.problem == "cannot read the source topic's configs"


def test_unavailable_features_change_nothing_but_show_the_drift() -> None:
    why = "unavailable on backup: the broker does not implement CreatePartitions (ApiVersions)"
    drift = topic_drift(sides("t", 4, 2), FLT, partitions_unavailable=why)
    assert drift.changes == 0
    assert drift.partitions is not None and drift.partitions.reason == why


def test_plan_keeps_only_differing_topics_sorted_with_acls() -> None:
    same = topic_drift(sides("a-same", 1, 1), FLT)
    later = topic_drift(sides("z", 2, 1), FLT)
    earlier = topic_drift(sides("b", 1, 2), FLT)  # more on target: reported, not fixed
    acl = AclBinding("TOPIC", "primary.z", "LITERAL", "User:a", "*", "READ", "ALLOW")
    plan = build_plan("primary->backup", 5, [same, later, earlier],
                      AclPlan((acl,), (), frozenset({acl})), {"acls": "x"})
    assert [t.source_topic for t in plan.topics] == ["b", "z"]
    assert plan.changes == 2  # one grow, one ACL
    assert plan.differences == 3
    assert plan.acls_add == (acl,)


def test_rendered_plan_names_key_values_action_and_why() -> None:
    drift = topic_drift(sides("orders", 1, 1, [ConfigEntry("min.insync.replicas", "2", T),
                                               ConfigEntry("retention.ms", "5", T)],
                              [ConfigEntry("retention.ms", "9", T),
                               ConfigEntry("segment.ms", "7", T)]), FLT)
    acl = AclBinding("TOPIC", "primary.orders", "LITERAL", "User:bob", "*", "READ", "ALLOW")
    plan = build_plan("primary->backup", 0, [drift], AclPlan((acl,), (), frozenset()),
                      {"partitions": "unavailable on backup: no CreatePartitions"})
    text = format_drift_plan(plan_message(plan, mode="plan"))
    assert "sync.mode: plan" in text
    assert "changes if applied: 3" in text
    assert "partitions: unavailable on backup: no CreatePartitions" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines()[5:]
            if line.startswith("  ") and line.split()[0] in
            ("retention.ms", "segment.ms", "min.insync.replicas")}
    assert rows["retention.ms"][1:4] == ["5", "9", "set"]
    assert rows["segment.ms"][1:4] == ["(default)", "7", "delete"]
    assert rows["min.insync.replicas"][3] == "none"
    assert "excluded" in " ".join(rows["min.insync.replicas"])
    assert "User:bob" in text and "ACLs to add" in text


def test_no_drift_says_so() -> None:
    text = format_drift_plan(plan_message(build_plan("a->b", 0, [], None, {}), mode="apply"))
    assert "no drift" in text


def test_history_entries_round_trip_and_render() -> None:
    entry = HistoryEntry(1_700_000_000_000, "a->b", "operator (ann)", "config",
                         "a.orders retention.ms", "set retention.ms=5 (was 9)")
    assert HistoryEntry.from_json(entry.to_json()) == entry
    failed = HistoryEntry(1_700_000_000_001, "a->b", "configsync", "partitions", "a.t",
                          "grow from 1 to 2 partitions", ok=False, error="POLICY_VIOLATION")
    text = format_history([history_message(entry), history_message(failed)])
    assert "operator (ann)" in text and "2023-11-14T22:13:20.000Z" in text
    assert "FAILED: POLICY_VIOLATION" in text
    with pytest.raises(ValueError):
        HistoryEntry.from_json(b"[]")


@pytest.mark.parametrize("argv", [
    ["admin", "drift", "apply"], ["admin", "drift", "nonsense"],
    ["admin", "drift", "apply", "a->b", "--topic", "t"],
    ["admin", "drift", "a->b", "--limit", "3"]])
def test_drift_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]
                                   ) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert "usage:" in capsys.readouterr().err


# -- configuration keys ---------------------------------------------------------------------

BASE = "clusters = a, b\na.bootstrap.servers = h:1\nb.bootstrap.servers = h:2\n" \
       "a->b.enabled = true\n"


def test_sync_keys_are_read_per_flow() -> None:
    flow = parse_config(BASE + "sync.mode = plan\na->b.sync.topic.acls.mode = full\n"
                        "sync.topic.configs.interval.seconds = 15\n").flows["a->b"]
    assert (flow.sync_mode, flow.sync_topic_acls_mode) == ("plan", "full")
    assert flow.sync_topic_configs_interval_s == 15.0
    assert parse_config(BASE).flows["a->b"].sync_mode == "apply"


@pytest.mark.parametrize(("line", "key"), [
    ("sync.mode = later", "sync.mode"),
    ("a->b.sync.topic.acls.mode = all", "a->b.sync.topic.acls.mode"),
    ("sync.topic.acls.interval.seconds = -1", "sync.topic.acls.interval.seconds"),
    ("config.properties.exclude = (", "config.properties.exclude"),
    ("sync.topic.configs.enabled = yes", "sync.topic.configs.enabled")])
def test_bad_sync_values_name_key_and_line(line: str, key: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(BASE + line + "\n")
    assert error.value.key == key
    assert error.value.line == 5


def test_config_sync_switched_off_compares_partitions_only() -> None:
    drift = topic_drift(sides("t", 2, 1, [ConfigEntry("retention.ms", "1", T)], []), FLT,
                        sync_configs=False)
    assert drift.configs == ()
    assert drift.partitions is not None and drift.partitions.action == "grow"


def _drifting(target_value: str, at_ms: int = 1000) -> DriftPlan:
    drift = topic_drift(sides("orders", 3, 3, [],
                              [ConfigEntry("retention.ms", target_value, T)]), FLT)
    return build_plan("primary->backup", at_ms, [drift], None, {})


def test_drift_event_is_recorded_only_when_the_differences_are_new() -> None:
    first = drift_event(_drifting("4242"), [])
    assert first is not None and first.kind == DRIFT_DETECTED
    assert first.flow == "primary->backup" and first.at_ms == 1000
    assert first.detail == ("primary.orders retention.ms: source (default), target 4242 "
                            "-> delete")
    history = [first]
    # Steady drift, and a restart (history read back), a later round: nothing new.
    assert drift_event(_drifting("4242", at_ms=9000), history) is None
    # No drift: nothing to record.
    assert drift_event(build_plan("primary->backup", 1, [], None, {}), history) is None
    # Different differences: a new event.
    changed = drift_event(_drifting("7", at_ms=2000), history)
    assert changed is not None and "target 7 -> delete" in changed.detail
    # The same drift back after an applied change: new again.
    applied = HistoryEntry(3000, "primary->backup", "operator", "config",
                           "primary.orders retention.ms", "delete retention.ms")
    assert drift_event(_drifting("4242"), [first, applied]) is not None
    # Another flow's history says nothing about this one.
    other = HistoryEntry(1, "other->backup", "configsync", DRIFT_DETECTED, "", first.detail)
    assert drift_event(_drifting("4242"), [first, other]) is None
    assert drift_event(_drifting("4242"), [other]) is not None
