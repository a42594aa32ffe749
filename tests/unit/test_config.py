"""The config loader: MM2 dedicated-mode files -> MirrorSettings (MirrorMakerConfig)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from config_text import BASE, BASE_LINES, config_error, flow, load, warning_keys

from mirrorline.configfile import load_config
from mirrorline.core.config import (
    DEFAULTS,
    MIRRORLINE_DEFAULT_OVERRIDES,
    MM2_DEFAULTS,
    parse_config,
)
from mirrorline.core.errors import ConfigError
from mirrorline.core.offload import OffloadSettings
from mirrorline.core.settings import AuditSettings, CanarySettings, FlowSettings

# MM2's connect-mirror-maker.properties as shipped with Kafka; only the
# license header is shortened and three long comment lines are wrapped.
MM2_SAMPLE = """\
# Licensed to the Apache Software Foundation (ASF) under A or more
# contributor license agreements.
# see org.apache.kafka.clients.consumer.ConsumerConfig for more details

# Sample MirrorMaker 2.0 top-level configuration file
# Run with ./bin/connect-mirror-maker.sh connect-mirror-maker.properties

# specify any number of cluster aliases
clusters = A, B

# connection information for each cluster
# This is a comma separated host:port pairs for each cluster
# for e.g. "A_host1:9092, A_host2:9092, A_host3:9092"
A.bootstrap.servers = A_host1:9092, A_host2:9092, A_host3:9092
B.bootstrap.servers = B_host1:9092, B_host2:9092, B_host3:9092

# enable and configure individual replication flows
A->B.enabled = true

# regex which defines which topics gets replicated. For eg "foo-.*"
A->B.topics = .*

B->A.enabled = true
B->A.topics = .*

# Setting replication factor of newly created remote topics
replication.factor=1

############################# Internal Topic Settings  #############################
# The replication factor for mm2 internal topics "heartbeats", "B.checkpoints.internal" and
# "mm2-offset-syncs.B.internal"
# For anything other than development testing, a value greater than 1 is recommended to
# ensure availability such as 3.
checkpoints.topic.replication.factor=1
heartbeats.topic.replication.factor=1
offset-syncs.topic.replication.factor=1

# The replication factor for connect internal topics "mm2-configs.B.internal",
# "mm2-offsets.B.internal" and
# "mm2-status.B.internal"
# For anything other than development testing, a value greater than 1 is recommended to
# ensure availability such as 3.
offset.storage.replication.factor=1
status.storage.replication.factor=1
config.storage.replication.factor=1

# customize as needed
# replication.policy.separator = _
# sync.topic.acls.enabled = false
# emit.heartbeats.interval.seconds = 5
"""


# --- MM2's sample file ---------------------------------------------------------------------


def test_mm2_sample_file_loads() -> None:
    settings = parse_config(MM2_SAMPLE, source="connect-mirror-maker.properties")
    assert list(settings.clusters) == ["A", "B"]
    assert settings.clusters["A"].bootstrap_servers == "A_host1:9092, A_host2:9092, A_host3:9092"
    assert sorted(f.name for f in settings.enabled_flows()) == ["A->B", "B->A"]
    a_b = settings.flows["A->B"]
    assert a_b.topics == (".*",)
    assert (a_b.replication_factor, a_b.checkpoints_topic_replication_factor,
            a_b.heartbeats_topic_replication_factor, a_b.offset_syncs_topic_replication_factor,
            a_b.offset_storage_replication_factor) == (1, 1, 1, 1, 1)
    # The only keys without effect are the two Connect storage topics Mirrorline has no use
    # for; heartbeats.topic.replication.factor is the heartbeat service's, and acted on.
    assert warning_keys(settings) == ["status.storage.replication.factor",
                                      "config.storage.replication.factor"]
    assert all("no effect in Mirrorline" in w.message for w in settings.warnings)


def test_load_config_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "mm2.properties"
    path.write_text(MM2_SAMPLE)
    settings = load_config(path)
    assert settings.source_path == str(path)
    assert len(settings.enabled_flows()) == 2


def test_load_config_error_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "mm2.properties"
    path.write_text(BASE + "offset.lag.max = lots\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}:4: offset.lag.max:")


@pytest.mark.parametrize("make", [lambda p: p / "missing.properties", lambda p: p])
def test_load_config_unreadable_file_names_the_path(tmp_path: Path, make: object) -> None:
    assert callable(make)
    path = make(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_load_config_skips_bom_and_falls_back_to_latin1(tmp_path: Path) -> None:
    utf8 = tmp_path / "utf8.properties"
    utf8.write_bytes(b"\xef\xbb\xbf" + BASE.encode() + "a->b.groups = caf\u00e9\n".encode())
    assert load_config(utf8).flows["a->b"].groups == ("caf\u00e9",)
    latin1 = tmp_path / "latin1.properties"
    latin1.write_bytes(BASE.encode() + b"a->b.groups = caf\xe9\n")
    assert load_config(latin1).flows["a->b"].groups == ("caf\u00e9",)


# --- defaults -------------------------------------------------------------------------------

EXPECTED_DEFAULTS = {
    # field: value with no key set (MM2's default unless marked "ours")
    "enabled": False,
    "topics": (".*",),
    "topics_exclude": (r".*[\-\.]internal", r".*\.replica", "__.*"),
    "groups": (".*",),
    "groups_exclude": ("console-consumer-.*", "connect-.*", "__.*"),
    "config_properties_exclude": (
        r"follower\.replication\.throttled\.replicas",
        r"leader\.replication\.throttled\.replicas",
        r"message\.timestamp\.difference\.max\.ms", r"message\.timestamp\.type",
        r"unclean\.leader\.election\.enable", r"min\.insync\.replicas"),
    "use_defaults_from": "target",
    "replication_factor": -1,  # ours (MM2: 2)
    "refresh_topics_enabled": True,
    "refresh_topics_interval_s": 30.0,  # ours (MM2: 600)
    "refresh_groups_enabled": True,
    "refresh_groups_interval_s": 30.0,  # ours (MM2: 600)
    "sync_topic_configs_enabled": True,
    "sync_topic_configs_interval_s": 60.0,  # ours (MM2: 600)
    "sync_topic_acls_enabled": True,
    "sync_topic_acls_interval_s": 60.0,  # ours (MM2: 600)
    "emit_offset_syncs_enabled": True,
    "offset_syncs_topic_location": "source",
    "offset_syncs_topic_replication_factor": -1,  # ours (MM2: 3)
    "offset_lag_max": 100,
    "heartbeats_replication_enabled": True,
    "emit_heartbeats_enabled": True,
    "emit_heartbeats_interval_s": 1.0,
    "heartbeats_topic_replication_factor": -1,  # ours (MM2: 3)
    "emit_checkpoints_enabled": True,
    "emit_checkpoints_interval_s": 5.0,  # ours (MM2: 60)
    "checkpoints_topic_replication_factor": -1,  # ours (MM2: 3)
    "sync_group_offsets_enabled": False,
    "sync_group_offsets_interval_s": 60.0,
    "consumer_poll_timeout_ms": 1000,
    "offset_storage_replication_factor": -1,  # ours (MM2: 3)
    "offset_flush_interval_ms": 5000,  # ours (MM2: 60000)
    "admin_timeout_ms": 60000,
    "sync_mode": "apply",  # ours (no MM2 equivalent)
    "sync_topic_acls_mode": "mm2",  # ours (no MM2 equivalent)
    # ours: where the flow's partitions run (issue 8)
    "offload": OffloadSettings("auto", 10485760, 60, 1000000, 10000),
    "source_cluster_alias": None,  # the flow's own alias goes into topic names
    "target_cluster_alias": None,
    "canary": CanarySettings(enabled=True, interval_ms=1000, latency_slo_ms=5000),  # ours
    "audit": AuditSettings(enabled=True, window_ms=60000, grace_ms=10000),  # ours
    "resume_tail_match": True,  # ours (mirrorline.resume.tail.match)
    "batch_path": "auto",  # ours (mirrorline.batch.path)
}


@pytest.mark.parametrize(("field", "expected"), EXPECTED_DEFAULTS.items())
def test_defaults(field: str, expected: object) -> None:
    assert getattr(flow(), field) == expected


def test_default_policy() -> None:
    policy = flow().policy
    assert (policy.kind, policy.separator, policy.internal_topic_separator_enabled) == (
        "default", None, True)


@pytest.mark.parametrize(("extra", "facts"), [
    ("", {"offset_syncs_topic": "mm2-offset-syncs.b.internal", "offset_syncs_cluster": "a",
          "checkpoints_topic": "a.checkpoints.internal", "heartbeats_topic": "heartbeats",
          "remote": "a.orders", "offset_map_topic": "mirrorline-offset-map.a.internal"}),
    # MM2's naming aliases rename every topic name the flow derives -- the offset-syncs topic
    # included (MirrorSourceConfig.offsetSyncsTopic()); the clusters holding them stay.
    ("source.cluster.alias = east\ntarget.cluster.alias = west\n",
     {"offset_syncs_topic": "mm2-offset-syncs.west.internal", "offset_syncs_cluster": "a",
      "checkpoints_topic": "east.checkpoints.internal", "heartbeats_topic": "heartbeats",
      "remote": "east.orders", "offset_map_topic": "mirrorline-offset-map.a.internal"}),
    ("target.cluster.alias = west\noffset-syncs.topic.location = target\n"
     "replication.policy.separator = _\n",
     {"offset_syncs_topic": "mm2-offset-syncs_a_internal", "offset_syncs_cluster": "b",
      "checkpoints_topic": "a_checkpoints_internal", "heartbeats_topic": "heartbeats",
      "remote": "a_orders", "offset_map_topic": "mirrorline-offset-map.a.internal"}),
])
def test_derived_facts_follow_the_naming_aliases(extra: str, facts: dict[str, str]) -> None:
    f = flow(extra)
    assert {"offset_syncs_topic": f.offset_syncs_topic,
            "offset_syncs_cluster": f.offset_syncs_cluster,
            "checkpoints_topic": f.checkpoints_topic, "heartbeats_topic": f.heartbeats_topic,
            "remote": f.remote_topic("orders"), "offset_map_topic": f.offset_map_topic} == facts


def test_resume_tail_match_and_reset_policy_are_read_once() -> None:
    f = flow("mirrorline.resume.tail.match = FALSE\na->b.consumer.auto.offset.reset = latest\n")
    assert (f.resume_tail_match, f.auto_offset_reset) == (False, "latest")
    assert (flow().resume_tail_match, flow().auto_offset_reset) == (True, "earliest")
    error = config_error("mirrorline.resume.tail.match = no\n")
    assert (error.key, error.line) == ("mirrorline.resume.tail.match", BASE_LINES + 1)


def test_every_flow_setting_has_a_default_test() -> None:
    skipped = {"source", "target", "policy", "clients", "properties"}
    names = {f.name for f in dataclasses.fields(FlowSettings)} - skipped
    assert names == set(EXPECTED_DEFAULTS)


def test_default_overrides_table() -> None:
    assert {key: (mm2, ours) for key, (mm2, ours, _why) in
            MIRRORLINE_DEFAULT_OVERRIDES.items()} == {
        "replication.factor": ("2", "-1"),
        "offset-syncs.topic.replication.factor": ("3", "-1"),
        "checkpoints.topic.replication.factor": ("3", "-1"),
        "heartbeats.topic.replication.factor": ("3", "-1"),
        "offset.storage.replication.factor": ("3", "-1"),
        "refresh.topics.interval.seconds": ("600", "30"),
        "refresh.groups.interval.seconds": ("600", "30"),
        "emit.checkpoints.interval.seconds": ("60", "5"),
        "offset.flush.interval.ms": ("60000", "5000"),
        "sync.topic.configs.interval.seconds": ("600", "60"),
        "sync.topic.acls.interval.seconds": ("600", "60"),
    }
    for key, (mm2, ours, why) in MIRRORLINE_DEFAULT_OVERRIDES.items():
        assert MM2_DEFAULTS[key] == mm2
        assert DEFAULTS[key] == ours
        assert why
    untouched = set(MM2_DEFAULTS) - set(MIRRORLINE_DEFAULT_OVERRIDES)
    assert all(DEFAULTS[key] == MM2_DEFAULTS[key] for key in untouched)


def test_explicit_values_override_defaults() -> None:
    f = flow("""
        replication.factor = 3
        refresh.topics.interval.seconds = 600
        emit.checkpoints.interval.seconds = 60
        offset.flush.interval.ms = 60000
        sync.group.offsets.enabled = TRUE
        emit.heartbeats.enabled = False
        admin.timeout.ms = 1234
    """)
    assert (f.replication_factor, f.refresh_topics_interval_s, f.emit_checkpoints_interval_s,
            f.offset_flush_interval_ms) == (3, 600.0, 60.0, 60000)
    assert (f.sync_group_offsets_enabled, f.emit_heartbeats_enabled) == (True, False)
    assert f.admin_timeout_ms == 1234


# --- flows and precedence -------------------------------------------------------------------


def test_every_ordered_pair_is_a_flow_and_disabled_ones_are_kept() -> None:
    settings = load("clusters = a, b, c\nc.bootstrap.servers = c1:9092\na->c.enabled = true\n")
    assert sorted(settings.flows) == ["a->b", "a->c", "b->a", "b->c", "c->a", "c->b"]
    assert [f.name for f in settings.enabled_flows()] == ["a->c"]
    assert settings.enabled_flows(("b",)) == []
    assert not settings.flows["c->a"].enabled


def test_single_cluster_has_no_flows() -> None:
    settings = parse_config("clusters = a\na.bootstrap.servers = a1:9092\n")
    assert settings.flows == {}


def test_flow_level_overrides_top_level() -> None:
    settings = load("""
        topics = orders.*
        a->b.topics = payments.*, audit
        offset.lag.max = 10
        a->b.offset.lag.max = 0
        sync.topic.acls.enabled = false
        b->a.sync.topic.acls.enabled = true
        replication.policy.separator = _
        a->b.replication.policy.separator = -
    """)
    a_b, b_a = settings.flows["a->b"], settings.flows["b->a"]
    assert (a_b.topics, b_a.topics) == (("payments.*", "audit"), ("orders.*",))
    assert (a_b.offset_lag_max, b_a.offset_lag_max) == (0, 10)
    assert (a_b.sync_topic_acls_enabled, b_a.sync_topic_acls_enabled) == (False, True)
    assert (a_b.policy.separator, b_a.policy.separator) == ("-", "_")
    assert a_b.properties["topics"] == "payments.*, audit"
    assert b_a.properties["topics"] == "orders.*"


def test_top_level_use_defaults_from_applies() -> None:
    settings = load("use.defaults.from = source\nb->a.use.defaults.from = target\n")
    assert settings.flows["a->b"].use_defaults_from == "source"
    assert settings.flows["b->a"].use_defaults_from == "target"


def test_worker_keys_resolve_flow_then_target_cluster_then_top() -> None:
    settings = load("""
        clusters = a, b, c
        c.bootstrap.servers = c1:9092
        offset.flush.interval.ms = 1000
        b.offset.flush.interval.ms = 2000
        a->b.offset.flush.interval.ms = 3000
        offset.storage.replication.factor = 2
        a.offset.storage.replication.factor = 1
    """)
    flows = settings.flows
    assert flows["a->b"].offset_flush_interval_ms == 3000
    assert flows["c->b"].offset_flush_interval_ms == 2000
    assert flows["b->a"].offset_flush_interval_ms == 1000
    assert flows["b->a"].offset_storage_replication_factor == 1
    assert flows["a->c"].offset_storage_replication_factor == 2


def test_policy_class_spellings() -> None:
    for name in ("org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
                 "IdentityReplicationPolicy", "identity"):
        assert flow(f"replication.policy.class = {name}\n").policy.kind == "identity"
    for name in ("org.apache.kafka.connect.mirror.DefaultReplicationPolicy",
                 "DefaultReplicationPolicy", "default"):
        assert flow(f"a->b.replication.policy.class = {name}\n").policy.kind == "default"


def test_policy_separator_and_internal_flag() -> None:
    policy = flow("replication.policy.separator = __\n"
                  "replication.policy.internal.topic.separator.enabled = false\n").policy
    assert (policy.separator, policy.internal_topic_separator_enabled) == ("__", False)


def test_enabled_only_by_flow_key() -> None:
    settings = load("a->b.enabled = true\n")
    assert settings.flows["a->b"].enabled
    assert not settings.flows["b->a"].enabled


def test_top_level_enabled_enables_pairs_with_heartbeats_like_mm2() -> None:
    settings = load("""
        enabled = true
        b->a.emit.heartbeats.enabled = false
    """, base=BASE.replace("clusters = a, b", "clusters = a, b, c") + "c.bootstrap.servers=c:1\n"
                  + "c->a.enabled = false\n")
    enabled = sorted(f.name for f in settings.enabled_flows())
    assert enabled == ["a->b", "a->c", "b->c", "c->b"]
    assert "enabled" in warning_keys(settings)


def test_alias_named_like_a_key_prefix_keeps_the_top_level_key() -> None:
    settings = parse_config("clusters = sync, b\nsync.bootstrap.servers = s:1\n"
                            "b.bootstrap.servers = b:1\nsync.group.offsets.enabled = true\n")
    assert settings.flows["sync->b"].sync_group_offsets_enabled
    assert "sync.group.offsets.enabled" not in warning_keys(settings)


def test_raw_keeps_values_as_read() -> None:
    settings = load("a->b.topics = x   \n")
    assert settings.raw["a->b.topics"] == "x   "
    assert settings.flows["a->b"].topics == ("x",)


def test_clusters_connection_settings() -> None:
    settings = load("security.protocol = SSL\nb.security.protocol = sasl_ssl\n"
                    "ssl.truststore.location = /ca.pem\n")
    assert settings.clusters["a"].connection == {
        "bootstrap.servers": "a1:9092", "security.protocol": "SSL",
        "ssl.truststore.location": "/ca.pem"}
    assert settings.clusters["b"].connection["security.protocol"] == "sasl_ssl"


def test_top_level_bootstrap_servers_is_inherited_with_a_warning() -> None:
    settings = parse_config("clusters = a, b\nbootstrap.servers = shared:9092\n"
                            "a.bootstrap.servers = a1:9092\n")
    assert settings.clusters["b"].bootstrap_servers == "shared:9092"
    assert settings.clusters["a"].bootstrap_servers == "a1:9092"
    assert "b.bootstrap.servers" in warning_keys(settings)


# --- client configs (MirrorMakerConfig.clientConfig) ----------------------------------------------


def test_mm2_pinned_source_consumer_example() -> None:
    # MM2 test: source.cluster.bootstrap.servers=localhost:2345 plus
    # consumer.max.poll.interval.ms=120000 -> exactly these keys (client.id is set at runtime).
    settings = parse_config("clusters = source1, target2\n"
                            "source1.bootstrap.servers = localhost:2345\n"
                            "target2.bootstrap.servers = localhost:3456\n"
                            "source1->target2.consumer.max.poll.interval.ms = 120000\n")
    assert dict(settings.flows["source1->target2"].clients.source_consumer) == {
        "enable.auto.commit": "false", "auto.offset.reset": "earliest",
        "max.poll.interval.ms": "120000", "bootstrap.servers": "localhost:2345"}


def test_mm2_pinned_worker_example_adapted() -> None:
    # MM2's worker-config example, adapted: `SASL` is not a protocol (we reject it), and config
    # providers are not supported, so those two lines change.
    settings = load("""
        replication.policy.separator = _
        offset.storage.replication.factor = 123
        b.status.storage.replication.factor = 456
        b.producer.client.id = client-one
        b.security.protocol = PLAINTEXT
        b.producer.security.protocol = SASL_PLAINTEXT
        ssl.truststore.password = secret1
        ssl.key.password = secret2
    """)
    b_a, a_b = settings.flows["b->a"], settings.flows["a->b"]
    assert b_a.offset_storage_replication_factor == 123
    assert b_a.policy.separator == "_"
    producer = a_b.clients.target_producer
    assert producer["client.id"] == "client-one"
    assert producer["security.protocol"] == "SASL_PLAINTEXT"
    assert a_b.clients.target_consumer["security.protocol"] == "PLAINTEXT"
    assert producer["ssl.truststore.password"] == "secret1"
    assert producer["ssl.key.password"] == "secret2"
    assert "b.status.storage.replication.factor" in warning_keys(settings)


def test_client_precedence() -> None:
    clients = flow("""
        security.protocol = SSL
        ssl.truststore.location = /top.pem
        a.ssl.truststore.location = /a.pem
        consumer.max.poll.records = 10
        consumer.fetch.min.bytes = 7
        a->b.consumer.max.poll.records = 20
        a->b.consumer.fetch.max.wait.ms = 100
        a.consumer.max.poll.records = 30
        a.consumer.enable.auto.commit = true
        b.consumer.isolation.level = read_committed
        producer.linger.ms = 5
        a->b.producer.linger.ms = 6
        b.producer.acks = 1
        admin.request.timeout.ms = 1000
        b.admin.request.timeout.ms = 2000
        consumer.poll.timeout.ms = 250
        admin.timeout.ms = 9999
    """).clients
    assert dict(clients.source_consumer) == {
        "bootstrap.servers": "a1:9092", "security.protocol": "SSL",
        "ssl.truststore.location": "/a.pem",
        "max.poll.records": "30",           # cluster beats flow beats top level
        "fetch.min.bytes": "7",             # top level
        "fetch.max.wait.ms": "100",         # flow
        "enable.auto.commit": "false",      # forced
        "auto.offset.reset": "earliest",    # default
    }
    assert clients.target_consumer["isolation.level"] == "read_committed"
    assert "isolation.level" not in clients.source_consumer
    assert clients.target_consumer["ssl.truststore.location"] == "/top.pem"
    assert dict(clients.target_producer) == {
        "bootstrap.servers": "b1:9092", "security.protocol": "SSL",
        "ssl.truststore.location": "/top.pem", "linger.ms": "6", "acks": "1"}
    assert clients.source_producer["linger.ms"] == "6"
    assert "acks" not in clients.source_producer
    assert clients.source_admin["request.timeout.ms"] == "1000"
    assert clients.target_admin["request.timeout.ms"] == "2000"
    # MM2 properties that only look like client keys never reach clients.
    assert "poll.timeout.ms" not in clients.source_consumer
    assert "timeout.ms" not in clients.source_admin


@pytest.mark.parametrize(("flow_level", "cluster_level", "expected"), [
    (None, None, None),
    ("read_committed", None, "read_committed"),
    (None, "read_committed", "read_committed"),
    ("read_uncommitted", "read_committed", "read_committed"),
    ("read_committed", "read_uncommitted", "read_uncommitted"),
    ("garbage", "read_committed", "read_committed"),
])
def test_source_consumer_isolation_level_precedence(flow_level: str | None,
                                                    cluster_level: str | None,
                                                    expected: str | None) -> None:
    # MirrorMakerConfig: `source.consumer.isolation.level` (our `a.consumer.`) beats
    # `consumer.isolation.level` (our `a->b.consumer.`); `a.isolation.level` is ignored.
    text = "a.isolation.level = read_committed\n"
    if flow_level:
        text += f"a->b.consumer.isolation.level = {flow_level}\n"
    if cluster_level:
        text += f"a.consumer.isolation.level = {cluster_level}\n"
    settings = load(text)
    assert settings.flows["a->b"].clients.source_consumer.get("isolation.level") == expected
    assert "a.isolation.level" in warning_keys(settings)


def test_flow_client_override_of_connection_key_wins() -> None:
    clients = flow("a.security.protocol = SSL\na->b.consumer.security.protocol = SASL_SSL\n"
                   ).clients
    assert clients.source_consumer["security.protocol"] == "SASL_SSL"
    assert clients.source_admin["security.protocol"] == "SSL"


def test_explicit_auto_offset_reset_and_acks_are_kept() -> None:
    clients = flow("a.consumer.auto.offset.reset = latest\nb.producer.acks = 1\n").clients
    assert clients.source_consumer["auto.offset.reset"] == "latest"
    assert clients.target_producer["acks"] == "1"


@pytest.mark.parametrize("setting", ["b.producer.acks = 0", "a->b.producer.acks = 0",
                                     "producer.acks = 0"])
def test_acks_zero_on_the_target_is_refused_at_its_line(setting: str) -> None:
    """acks=0 yields no offsets: the flow would copy with no progress and no checkpoints."""
    error = config_error(f"# comment\n{setting}\n")
    assert error.line == BASE_LINES + 2
    assert error.key == setting.split(" = ")[0]
    assert "without acknowledgements" in str(error)


def test_batch_path_is_a_flow_key_with_three_values() -> None:
    assert flow().batch_path == "auto"
    assert flow("a->b.mirrorline.batch.path = off\n").batch_path == "off"
    assert flow("mirrorline.batch.path = on\n").batch_path == "on"
    error = config_error("mirrorline.batch.path = always\n")
    assert (error.key, error.line) == ("mirrorline.batch.path", BASE_LINES + 1)
