"""ACL sync rules (MM2's syncTopicAcls) and our `full` mode: what is copied, renamed, downgraded,
and which ACLs may ever be removed downstream."""

from __future__ import annotations

import pytest

from mirrorline.core.aclsync import (
    AclBinding,
    AclRules,
    desired_acls,
    grants_write_on_remote_topic,
    plan_acls,
    transform,
)
from mirrorline.core.filters import GroupFilter, TopicFilter, should_replicate_topic
from mirrorline.core.policy import DefaultReplicationPolicy

POLICY = DefaultReplicationPolicy()


def rules(mode: str = "mm2", topics: tuple[str, ...] = (".*",),
          groups: tuple[str, ...] = (".*",)) -> AclRules:
    flt = TopicFilter(topics)
    return AclRules(
        replicates_topic=lambda t: should_replicate_topic(
            t, policy=POLICY, topic_filter=flt, target_alias="backup",
            heartbeats_replication_enabled=True, canary_enabled=True),
        remote_name=lambda t: POLICY.format_remote_topic("source", t),
        groups=GroupFilter(groups), mode=mode)  # type: ignore[arg-type]


def topic_acl(name: str, operation: str, permission: str = "ALLOW",
              pattern: str = "LITERAL", principal: str = "User:alice") -> AclBinding:
    return AclBinding("TOPIC", name, pattern, principal, "*", operation, permission)


def test_allow_write_is_never_replicated() -> None:
    assert transform(topic_acl("test_topic", "WRITE"), rules()) is None


def test_allow_all_becomes_read_on_the_remote_topic() -> None:
    assert transform(topic_acl("test_topic", "ALL"), rules()) == \
        topic_acl("source.test_topic", "READ")


def test_deny_all_is_replicated_unchanged() -> None:
    assert transform(topic_acl("test_topic", "ALL", "DENY"), rules()) == \
        topic_acl("source.test_topic", "ALL", "DENY")


@pytest.mark.parametrize(("operation", "permission"), [
    ("DESCRIBE", "ALLOW"), ("READ", "ALLOW"), ("WRITE", "DENY"), ("DESCRIBE_CONFIGS", "ALLOW")])
def test_other_entries_are_copied_as_they_are(operation: str, permission: str) -> None:
    assert transform(topic_acl("t", operation, permission), rules()) == \
        topic_acl("source.t", operation, permission)


def test_the_wildcard_quirk_becomes_a_literal_acl_on_source_star() -> None:
    """MM2 quirk kept: literal `*` passes the default filter, becomes topic `source.*`."""
    assert transform(topic_acl("*", "DESCRIBE"), rules()) == topic_acl("source.*", "DESCRIBE")


def test_topics_the_flow_does_not_replicate_are_not_copied() -> None:
    narrow = rules(topics=("orders",))
    assert transform(topic_acl("payments", "READ"), narrow) is None
    assert transform(topic_acl("orders", "READ"), narrow) is not None
    assert transform(topic_acl("backup.orders", "READ"), rules()) is None  # a cycle
    assert transform(topic_acl("x.internal", "READ"), rules()) is None  # excluded


def test_mm2_mode_copies_no_prefixed_and_no_group_acls() -> None:
    assert transform(topic_acl("ord", "READ", pattern="PREFIXED"), rules()) is None
    group = AclBinding("GROUP", "billing", "LITERAL", "User:alice", "*", "READ", "ALLOW")
    assert transform(group, rules()) is None


def test_full_mode_renames_prefixes_and_copies_mirrored_groups() -> None:
    full = rules("full", groups=("billing.*",))
    assert transform(topic_acl("ord", "ALL", pattern="PREFIXED"), full) == \
        topic_acl("source.ord", "READ", pattern="PREFIXED")
    assert transform(topic_acl("ord", "WRITE", pattern="PREFIXED"), full) is None
    billing = AclBinding("GROUP", "billing-eu", "LITERAL", "User:alice", "*", "READ", "ALLOW")
    other = AclBinding("GROUP", "audit", "LITERAL", "User:alice", "*", "READ", "ALLOW")
    assert transform(billing, full) == billing
    assert transform(other, full) is None
    cluster = AclBinding("CLUSTER", "kafka-cluster", "LITERAL", "User:a", "*", "ALL", "ALLOW")
    assert transform(cluster, full) is None


def test_no_planned_acl_grants_write_on_a_remote_topic() -> None:
    source = [topic_acl(f"t{i}", op, perm, pattern)
              for i, (op, perm, pattern) in enumerate(
                  (op, perm, pattern) for op in ("ALL", "WRITE", "READ", "ALTER")
                  for perm in ("ALLOW", "DENY") for pattern in ("LITERAL", "PREFIXED"))]
    for mode in ("mm2", "full"):
        assert not any(grants_write_on_remote_topic(b)
                       for b in desired_acls(source, rules(mode)))


# -- full-mode diff -------------------------------------------------------------------------


def test_mm2_mode_only_adds() -> None:
    existing = topic_acl("source.gone", "READ")
    plan = plan_acls([topic_acl("t", "READ")], [existing], owned=[existing], rules=rules())
    assert plan.add == (topic_acl("source.t", "READ"),)
    assert plan.remove == ()


def test_full_mode_removes_what_it_created_and_is_gone_upstream() -> None:
    ours = topic_acl("source.gone", "READ")
    plan = plan_acls([], [ours], owned=[ours], rules=rules("full"))
    assert plan.remove == (ours,)
    assert plan.owned_after == frozenset()


def test_full_mode_never_removes_what_it_did_not_create() -> None:
    theirs = topic_acl("source.gone", "READ")  # made by an operator on the target
    plan = plan_acls([], [theirs], owned=[], rules=rules("full"))
    assert plan.remove == ()


def test_an_acl_already_on_the_target_never_becomes_ours() -> None:
    """Equal to a source ACL but pre-existing on the target: not added, not owned, so it
    stays when the source ACL goes away."""
    theirs = topic_acl("source.t", "READ")
    first = plan_acls([topic_acl("t", "READ")], [theirs], owned=[], rules=rules("full"))
    assert first.add == () and first.owned_after == frozenset()
    later = plan_acls([], [theirs], owned=first.owned_after, rules=rules("full"))
    assert later.remove == ()


def test_created_acls_are_recorded_and_stale_records_dropped() -> None:
    wanted = topic_acl("source.t", "READ")
    deleted_by_hand = topic_acl("source.x", "READ")
    plan = plan_acls([topic_acl("t", "READ")], [], owned=[deleted_by_hand],
                     rules=rules("full"))
    assert plan.add == (wanted,)
    assert plan.remove == ()  # not on the target any more: nothing to remove
    assert plan.owned_after == frozenset({wanted})


def test_binding_keys_round_trip() -> None:
    binding = topic_acl("a,b\"c", "READ")
    assert AclBinding.from_key(binding.key()) == binding
    with pytest.raises(ValueError):
        AclBinding.from_key("[1, 2]")
