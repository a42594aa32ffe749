"""ReplicationPolicy behaviour pinned by MM2's own tests (ReplicationPolicyTest and others)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from mirrorline.core.errors import ConfigError
from mirrorline.core.policy import (
    POLICY_KINDS,
    DefaultReplicationPolicy,
    IdentityReplicationPolicy,
    ReplicationPolicy,
    checkpoint_topic_name,
    is_cycle,
    make_policy,
    policy_kind,
)
from mirrorline.core.settings import PolicySettings

DEFAULT = DefaultReplicationPolicy()


# --- topic_source / upstream_topic: Java String.split semantics ----------------------

@pytest.mark.parametrize(("topic", "source"), [
    ("a.b.c", "a"),
    ("a", None),
    ("a.", None),
    (".b", ""),
    ("a..b", "a"),
    ("...", None),
    ("", None),
    ("a.b..", "a"),
    ("..a", ""),
])
def test_topic_source_emulates_java_split(topic: str, source: str | None) -> None:
    assert DEFAULT.topic_source(topic) == source


@pytest.mark.parametrize(("topic", "upstream"), [
    ("a.b.c", "b.c"),
    ("a", None),
    ("a.", None),
    (".b", "b"),
    ("a..b", ".b"),
    ("us-east.us-west.orders", "us-west.orders"),
])
def test_upstream_topic(topic: str, upstream: str | None) -> None:
    assert DEFAULT.upstream_topic(topic) == upstream


@pytest.mark.parametrize(("topic", "original"), [
    ("us-east.us-west.orders", "orders"),
    ("orders", "orders"),
    ("a..b", "b"),
])
def test_original_topic(topic: str, original: str) -> None:
    assert DEFAULT.original_topic(topic) == original


def test_custom_separator_parsing() -> None:
    policy = DefaultReplicationPolicy("__")
    assert policy.separator == "__"
    assert policy.format_remote_topic("source1", "topic4") == "source1__topic4"
    assert policy.topic_source("source1__topic4") == "source1"
    assert policy.upstream_topic("source1__topic4") == "topic4"
    assert policy.topic_source("source1.topic4") is None
    # Leftmost non-overlapping matches, as Java's regex split finds them.
    assert policy.topic_source("a___b") == "a"
    assert policy.upstream_topic("a___b") == "_b"


def test_empty_separator_names_and_reads_back_like_java() -> None:
    """MM2 accepts `replication.policy.separator =` (empty): a remote topic is
    `<alias><topic>`, and `topicSource` splits on the empty pattern, which Java's
    `String.split` turns into one piece per character -- so a name of two or more characters
    reads as coming from a one-character "cluster" (its first letter)."""
    policy = DefaultReplicationPolicy("")
    assert policy.format_remote_topic("primary", "orders") == "primaryorders"
    assert policy.format_remote_topic("", "orders") == "orders"
    assert policy.topic_source("orders") == "o"
    assert policy.upstream_topic("orders") == "rders"
    assert policy.topic_source("x") is None
    assert policy.original_topic("orders") == "s"
    # Internal names lose their dots too (the internal separator follows the separator).
    assert policy.checkpoints_topic("primary") == "primarycheckpointsinternal"
    assert policy.offset_syncs_topic("backup") == "mm2-offset-syncsbackupinternal"
    assert policy.is_internal_topic("primarycheckpointsinternal")


def test_empty_separator_detects_no_cycle_for_long_aliases() -> None:
    """With an empty separator every hop's "source" is a single character, so MM2's cycle
    check only ever fires for a one-character target alias: loops become possible."""
    policy = DefaultReplicationPolicy("")
    assert not is_cycle(policy, "backuporders", "backup")
    assert is_cycle(policy, "xBorders", "B")


# --- internal topic names -------------------------------------------------

@pytest.mark.parametrize("topic", [
    "__consumer_offsets", ".hiddentopic", "mm2-offsets.CLUSTER.internal",
    "mm2-offsets-CLUSTER-internal",
])
def test_internal_topics(topic: str) -> None:
    assert DEFAULT.is_internal_topic(topic)


def test_underscore_internal_name_is_not_internal_with_default_separator() -> None:
    assert not DEFAULT.is_internal_topic("mm2-offsets_CLUSTER_internal")
    assert not DEFAULT.is_internal_topic("orders")


def test_internal_names_default_separator() -> None:
    assert DEFAULT.separator == "."
    assert DEFAULT.heartbeats_topic() == "heartbeats"
    assert DEFAULT.offset_syncs_topic("CLUSTER") == "mm2-offset-syncs.CLUSTER.internal"
    assert DEFAULT.checkpoints_topic("CLUSTER") == "CLUSTER.checkpoints.internal"


def test_internal_separator_disabled_keeps_dot_for_internal_names() -> None:
    policy = DefaultReplicationPolicy("__", internal_topic_separator_enabled=False)
    assert policy.offset_syncs_topic("CLUSTER") == "mm2-offset-syncs.CLUSTER.internal"
    assert policy.checkpoints_topic("CLUSTER") == "CLUSTER.checkpoints.internal"
    assert policy.is_checkpoints_topic("CLUSTER.checkpoints.internal")
    assert policy.is_mm2_internal_topic("mm2-offset-syncs.CLUSTER.internal")
    # Remote names still use the custom separator.
    assert policy.format_remote_topic("CLUSTER", "t") == "CLUSTER__t"


def test_internal_separator_enabled_uses_custom_separator() -> None:
    policy = DefaultReplicationPolicy("__", internal_topic_separator_enabled=True)
    assert policy.offset_syncs_topic("CLUSTER") == "mm2-offset-syncs__CLUSTER__internal"
    assert policy.checkpoints_topic("CLUSTER") == "CLUSTER__checkpoints__internal"
    assert policy.is_checkpoints_topic("CLUSTER__checkpoints__internal")
    assert not policy.is_checkpoints_topic("CLUSTER.checkpoints.internal")
    assert policy.is_mm2_internal_topic("mm2-offset-syncs__CLUSTER__internal")
    assert policy.is_internal_topic("mm2-offset-syncs__CLUSTER__internal")


def test_underscore_separator_names_from_spec_2_6() -> None:
    policy = DefaultReplicationPolicy("_")
    assert policy.offset_syncs_topic("backup") == "mm2-offset-syncs_backup_internal"
    assert policy.checkpoints_topic("primary") == "primary_checkpoints_internal"
    assert policy.heartbeats_topic() == "heartbeats"


def test_unconfigured_separator_ignores_internal_flag() -> None:
    policy = DefaultReplicationPolicy(None, internal_topic_separator_enabled=False)
    assert policy.offset_syncs_topic("x") == "mm2-offset-syncs.x.internal"
    policy = DefaultReplicationPolicy(None, internal_topic_separator_enabled=True)
    assert policy.checkpoints_topic("x") == "x.checkpoints.internal"


@pytest.mark.parametrize(
    "topic", ["heartbeats", "source1.heartbeats", "source2.source1.heartbeats"])
def test_is_heartbeats_topic(topic: str) -> None:
    assert DEFAULT.is_heartbeats_topic(topic)


@pytest.mark.parametrize("topic", [
    "heartbeats!", "!heartbeats", "source1heartbeats", "source1-heartbeats",
])
def test_is_not_heartbeats_topic(topic: str) -> None:
    assert not DEFAULT.is_heartbeats_topic(topic)


def test_heartbeats_with_other_separator_does_not_parse() -> None:
    assert not DefaultReplicationPolicy("_").is_heartbeats_topic("us-west.heartbeats")
    assert DefaultReplicationPolicy("_").is_heartbeats_topic("us-west_heartbeats")


def test_is_checkpoints_topic() -> None:
    assert DEFAULT.is_checkpoints_topic("source1.checkpoints.internal")


@pytest.mark.parametrize("topic", [
    "checkpoints.internal", "checkpoints-internal", "checkpoints.internal!",
    "!checkpoints.internal", "source1checkpointsinternal",
])
def test_is_not_checkpoints_topic(topic: str) -> None:
    assert not DEFAULT.is_checkpoints_topic(topic)


# --- cycles (MirrorSourceConnector.isCycle) -------------------------------------------------------

@pytest.mark.parametrize(("topic", "cycle"), [
    ("topic1", False),
    ("source.topic1", False),
    ("target.topic1", True),
    ("target.source.topic1", True),
    ("source.target.topic1", True),
    ("target.source.target.topic1", True),
    ("source.target.source.topic1", True),
])
def test_is_cycle_default(topic: str, cycle: bool) -> None:
    assert is_cycle(DEFAULT, topic, "target") is cycle


class _LoopingPolicy(DefaultReplicationPolicy):
    """Reports a source but never shortens the name, like a naive identity policy."""

    def topic_source(self, topic: str) -> str | None:
        return "elsewhere"

    def upstream_topic(self, topic: str) -> str | None:
        return topic


class _NoUpstreamPolicy(DefaultReplicationPolicy):
    def upstream_topic(self, topic: str) -> str | None:
        return None


def test_is_cycle_stops_on_unchanged_or_missing_upstream() -> None:
    assert is_cycle(_LoopingPolicy(), "x.y", "target") is False
    assert is_cycle(_NoUpstreamPolicy(), "x.y", "target") is False
    assert is_cycle(_NoUpstreamPolicy(), "target.y", "target") is True


# --- identity (IdentityReplicationPolicy) ---------------------------------------------------------

def test_identity_pinned_examples() -> None:
    policy = IdentityReplicationPolicy(source_cluster_alias="primary")
    assert policy.format_remote_topic("primary", "topic1") == "topic1"
    assert policy.topic_source("topic1") == "primary"
    assert policy.upstream_topic("topic1") == "topic1"
    assert policy.original_topic("topic1") == "topic1"
    assert policy.format_remote_topic("backup", "heartbeats") == "backup.heartbeats"
    assert policy.topic_source("backup.heartbeats") == "backup"
    assert policy.upstream_topic("backup.heartbeats") == "heartbeats"
    assert policy.original_topic("b.a.heartbeats") == "heartbeats"
    assert policy.source_cluster_alias == "primary"


def test_identity_without_alias_reports_no_source() -> None:
    policy = IdentityReplicationPolicy()
    assert policy.topic_source("topic1") is None
    assert policy.topic_source("backup.heartbeats") == "backup"


def test_identity_heartbeat_detection_is_a_plain_suffix_test() -> None:
    policy = IdentityReplicationPolicy(source_cluster_alias="primary")
    # "fooheartbeats" looks like a heartbeat, so it is renamed ...
    assert policy.format_remote_topic("backup", "fooheartbeats") == "backup.fooheartbeats"
    # ... and parsed with the default rules: no separator, so not remote.
    assert policy.topic_source("fooheartbeats") is None
    assert not policy.is_heartbeats_topic("fooheartbeats")


def test_identity_internal_names_as_default() -> None:
    policy = IdentityReplicationPolicy("_", source_cluster_alias="primary")
    assert policy.offset_syncs_topic("b") == "mm2-offset-syncs_b_internal"
    assert policy.checkpoints_topic("a") == "a_checkpoints_internal"
    assert policy.is_checkpoints_topic("a_checkpoints_internal")
    assert policy.format_remote_topic("a", "heartbeats") == "a_heartbeats"


@pytest.mark.parametrize(("topic", "cycle"), [
    ("target.topic1", False),
    ("target.source.target.topic1", False),
    ("heartbeats", False),
    ("othersource.heartbeats", False),
    ("target.heartbeats", True),
    ("source.target.heartbeats", True),
    ("source.target.source.heartbeats", True),
])
def test_identity_cycles_only_for_heartbeats(topic: str, cycle: bool) -> None:
    policy = IdentityReplicationPolicy(source_cluster_alias="source")
    assert is_cycle(policy, topic, "target") is cycle


# --- checkpoint renaming (MirrorCheckpointTask.renameTopicPartition) ------------------------------

@pytest.mark.parametrize(("topic", "renamed"), [
    ("target2.topic3", "topic3"),
    ("topic3", "source1.topic3"),
    ("source6.topic7", "source1.source6.topic7"),
    ("target2.source1.topic8", "topic8"),  # original_topic, not one upstream step
    ("topic1", "source1.topic1"),
    ("target2.topic5", "topic5"),
])
def test_checkpoint_topic_name(topic: str, renamed: str) -> None:
    assert checkpoint_topic_name(DEFAULT, topic, source_alias="source1",
                                 target_alias="target2") == renamed


def test_checkpoint_topic_name_identity_keeps_names() -> None:
    policy = IdentityReplicationPolicy(source_cluster_alias="source1")
    assert checkpoint_topic_name(policy, "orders", source_alias="source1",
                                 target_alias="target2") == "orders"


# --- kinds and factory ----------------------------------------------------------------------

@pytest.mark.parametrize(("name", "kind"), [
    ("org.apache.kafka.connect.mirror.DefaultReplicationPolicy", "default"),
    ("org.apache.kafka.connect.mirror.IdentityReplicationPolicy", "identity"),
    ("DefaultReplicationPolicy", "default"),
    ("IdentityReplicationPolicy", "identity"),
    ("default", "default"),
    ("identity", "identity"),
    ("IDENTITY", "identity"),
    ("  org.apache.kafka.connect.mirror.identityreplicationpolicy ", "identity"),
    ("com.example.CustomPolicy", None),
    ("", None),
])
def test_policy_kind(name: str, kind: str | None) -> None:
    assert policy_kind(name) == kind


def test_policy_kinds_mapping_is_read_only_and_complete() -> None:
    assert set(POLICY_KINDS.values()) == {"default", "identity"}
    assert len(POLICY_KINDS) == 6
    with pytest.raises(TypeError):
        POLICY_KINDS["x"] = "default"  # type: ignore[index]


def test_make_policy_default() -> None:
    policy = make_policy(PolicySettings(separator="_", internal_topic_separator_enabled=False))
    assert type(policy) is DefaultReplicationPolicy
    assert policy.separator == "_"
    assert policy.checkpoints_topic("a") == "a.checkpoints.internal"
    assert policy.format_remote_topic("a", "t") == "a_t"


def test_make_policy_identity_receives_source_alias() -> None:
    policy = make_policy(PolicySettings(kind="identity"), source_alias="primary")
    assert isinstance(policy, IdentityReplicationPolicy)
    assert policy.topic_source("orders") == "primary"
    assert policy.format_remote_topic("primary", "orders") == "orders"


def test_make_policy_rejects_unknown_kind() -> None:
    settings = PolicySettings(kind="custom")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"replication\.policy\.class"):
        make_policy(settings)


# --- properties ------------------------------------------------------------------------------

_SEPARATORS = st.sampled_from([".", "_", "__", "-", "::"])
_TEXT = st.text(alphabet="abcXYZ019._-:", max_size=12)


@given(sep=_SEPARATORS, alias=st.text(alphabet="abcXYZ019_-.:", min_size=1, max_size=8),
       topic=_TEXT.filter(bool))
def test_format_then_parse_round_trips(sep: str, alias: str, topic: str) -> None:
    policy = DefaultReplicationPolicy(sep)
    # Unambiguous names only: the separator must not leak across the alias/topic boundary,
    # and a topic made only of separators vanishes under Java's split.
    assume(sep not in alias and not alias.endswith(sep[0]))
    assume(any(piece for piece in topic.split(sep)))
    remote = policy.format_remote_topic(alias, topic)
    assert policy.topic_source(remote) == alias
    assert policy.upstream_topic(remote) == topic


@given(sep=_SEPARATORS, topic=_TEXT)
def test_upstream_is_a_strict_suffix(sep: str, topic: str) -> None:
    policy = DefaultReplicationPolicy(sep)
    source = policy.topic_source(topic)
    upstream = policy.upstream_topic(topic)
    assert (source is None) == (upstream is None)
    if source is not None and upstream is not None:
        assert topic == source + sep + upstream
        assert len(upstream) < len(topic)
        assert upstream != ""


@given(topic=_TEXT)
def test_identity_matches_default_for_heartbeat_like_names(topic: str) -> None:
    identity: ReplicationPolicy = IdentityReplicationPolicy(source_cluster_alias="s")
    name = topic + "heartbeats"
    assert identity.topic_source(name) == DEFAULT.topic_source(name)
    assert identity.upstream_topic(name) == DEFAULT.upstream_topic(name)
    assert identity.original_topic(name) == DEFAULT.original_topic(name)
    assert identity.format_remote_topic("a", name) == DEFAULT.format_remote_topic("a", name)
