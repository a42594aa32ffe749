"""The config loader on bad input: errors naming key and line, warnings, secrets kept out."""

from __future__ import annotations

import pytest
from config_text import BASE, BASE_LINES, config_error, flow, load, warning_keys

from mirrorline.core.config import (
    DIFFERENCES_FROM_MM2,
    MIRRORLINE_KEYS,
    parse_config,
    redact,
)
from mirrorline.core.errors import ConfigError
from mirrorline.core.settings import AuditSettings, CanarySettings

# --- errors ---------------------------------------------------------------------------------


def assert_names(error: ConfigError, key: str, line: int | None) -> None:
    assert error.key == key
    assert key in str(error)
    assert error.line == line
    if line is not None:
        assert f"line {line}" in str(error)


def test_missing_clusters() -> None:
    error = config_error("", base="a.bootstrap.servers = x:1\n")
    assert_names(error, "clusters", None)


def test_empty_clusters() -> None:
    assert_names(config_error("", base="# c\nclusters =   \n"), "clusters", 2)


def test_cluster_without_bootstrap_servers() -> None:
    error = config_error("", base="clusters = a, b\na.bootstrap.servers = a:1\n")
    assert_names(error, "b.bootstrap.servers", 1)  # the clusters line that names b


def test_cluster_with_empty_bootstrap_servers() -> None:
    error = config_error("", base="clusters = a, b\na.bootstrap.servers = a:1\n"
                                  "b.bootstrap.servers =\n")
    assert_names(error, "b.bootstrap.servers", 3)


@pytest.mark.parametrize("aliases", ["a, b c", "a, b/c", "a, b,", "a, ,b", "a, caf\u00e9"])
def test_alias_with_illegal_characters(aliases: str) -> None:
    error = config_error("", base=f"\nclusters = {aliases}\n")
    assert_names(error, "clusters", 2)


def test_alias_containing_the_separator() -> None:
    base = "clusters = us.west, b\nus.west.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
    assert_names(config_error("", base=base), "clusters", 1)
    # With another separator the alias is fine ...
    parse_config(base + "replication.policy.separator = _\n")
    # ... unless one flow uses '.' again.
    error = config_error("replication.policy.separator = _\n"
                         "b->us.west.replication.policy.separator = .\n", base=base)
    assert_names(error, "clusters", 1)


def test_alias_containing_a_custom_separator() -> None:
    error = config_error("replication.policy.separator = _\n",
                         base="clusters = us_west\nus_west.bootstrap.servers = x:1\n")
    assert "'_'" in str(error)
    assert_names(error, "clusters", 1)


@pytest.mark.parametrize("key", ["a->c.enabled", "c->a.enabled", "a->a.enabled",
                                 "x.a->b.enabled", "a->b", "a->b."])
def test_flow_key_with_unknown_or_identical_clusters(key: str) -> None:
    assert_names(config_error(f"{key} = true\n"), key, BASE_LINES + 1)


NON_NEGATIVE_KEYS = [
    "refresh.topics.interval.seconds", "refresh.groups.interval.seconds",
    "sync.topic.configs.interval.seconds", "sync.topic.acls.interval.seconds",
    "emit.heartbeats.interval.seconds", "emit.checkpoints.interval.seconds",
    "sync.group.offsets.interval.seconds", "offset.lag.max", "consumer.poll.timeout.ms",
    "offset.flush.interval.ms", "admin.timeout.ms",
]
REPLICATION_FACTOR_KEYS = [
    "replication.factor", "offset-syncs.topic.replication.factor",
    "checkpoints.topic.replication.factor", "heartbeats.topic.replication.factor",
    "offset.storage.replication.factor", "status.storage.replication.factor",
]
BOOLEAN_KEYS = [
    "refresh.topics.enabled", "refresh.groups.enabled", "sync.topic.configs.enabled",
    "sync.topic.acls.enabled", "emit.offset-syncs.enabled", "heartbeats.replication.enabled",
    "emit.heartbeats.enabled", "emit.checkpoints.enabled", "sync.group.offsets.enabled",
    "replication.policy.internal.topic.separator.enabled", "enabled",
]


@pytest.mark.parametrize("prefix", ["", "a->b."])
@pytest.mark.parametrize("value", ["ten", "-1", "1.5", "1_000", "", "0x10"])
@pytest.mark.parametrize("key", NON_NEGATIVE_KEYS)
def test_bad_non_negative_numbers(prefix: str, value: str, key: str) -> None:
    assert_names(config_error(f"{prefix}{key} = {value}\n"), prefix + key, BASE_LINES + 1)


@pytest.mark.parametrize("key", NON_NEGATIVE_KEYS)
def test_zero_and_plus_sign_are_fine(key: str) -> None:
    load(f"{key} = 0\na->b.{key} = +5\n")


@pytest.mark.parametrize("value", ["0", "-2", "three", "", "40000"])
@pytest.mark.parametrize("key", REPLICATION_FACTOR_KEYS)
def test_bad_replication_factors(value: str, key: str) -> None:
    assert_names(config_error(f"a->b.{key} = {value}\n"), f"a->b.{key}", BASE_LINES + 1)


@pytest.mark.parametrize("key", REPLICATION_FACTOR_KEYS)
def test_replication_factor_minus_one_and_positive(key: str) -> None:
    load(f"{key} = -1\na->b.{key} = 1\n")


def test_cluster_level_worker_key_is_checked() -> None:
    error = config_error("b.offset.storage.replication.factor = 0\n")
    assert_names(error, "b.offset.storage.replication.factor", BASE_LINES + 1)


@pytest.mark.parametrize("prefix", ["", "a->b."])
@pytest.mark.parametrize("value", ["yes", "1", "on", "", "truee"])
@pytest.mark.parametrize("key", BOOLEAN_KEYS)
def test_bad_booleans(prefix: str, value: str, key: str) -> None:
    assert_names(config_error(f"{prefix}{key} = {value}\n"), prefix + key, BASE_LINES + 1)


@pytest.mark.parametrize("prefix", ["", "b->a."])
@pytest.mark.parametrize("key", ["topics", "topics.exclude", "groups", "groups.exclude",
                                 "config.properties.exclude"])
def test_bad_regexes(prefix: str, key: str) -> None:
    error = config_error(f"{prefix}{key} = ok.*, [broken\n")
    assert_names(error, prefix + key, BASE_LINES + 1)
    assert "[broken" in str(error)


@pytest.mark.parametrize("line", ["offset-syncs.topic.location = both",
                                  "a->b.offset-syncs.topic.location = Source",
                                  "use.defaults.from = both",
                                  "b->a.use.defaults.from = TARGET"])
def test_bad_choices(line: str) -> None:
    key = line.split(" =")[0]
    assert_names(config_error(line + "\n"), key, BASE_LINES + 1)


@pytest.mark.parametrize("key", ["security.protocol", "a.security.protocol",
                                 "consumer.security.protocol", "a.producer.security.protocol",
                                 "a->b.admin.security.protocol", "b.admin.security.protocol"])
def test_bad_security_protocol_anywhere(key: str) -> None:
    error = config_error(f"{key} = SASL\n")
    assert_names(error, key, BASE_LINES + 1)
    assert "SASL_SSL" in str(error)


def test_security_protocol_is_case_insensitive() -> None:
    load("security.protocol = sasl_ssl\na.consumer.security.protocol = Ssl\n")


@pytest.mark.parametrize("value", ["com.example.MyPolicy", "DefaultReplicationPolicyX", ""])
def test_unknown_replication_policy(value: str) -> None:
    assert_names(config_error(f"replication.policy.class = {value}\n"),
                 "replication.policy.class", BASE_LINES + 1)


@pytest.mark.parametrize("value", ["a/b", "a b"])
def test_bad_separator(value: str) -> None:
    assert_names(config_error(f"a->b.replication.policy.separator = {value}\n"),
                 "a->b.replication.policy.separator", BASE_LINES + 1)


@pytest.mark.parametrize("key", ["topic.filter.class", "a->b.group.filter.class",
                                 "config.property.filter.class"])
def test_custom_filter_classes_are_rejected(key: str) -> None:
    assert_names(config_error(f"{key} = com.example.Filter\n"), key, BASE_LINES + 1)


def test_default_filter_classes_are_accepted() -> None:
    settings = load("topic.filter.class = org.apache.kafka.connect.mirror.DefaultTopicFilter\n"
                    "a->b.group.filter.class = DefaultGroupFilter\n")
    assert warning_keys(settings) == []


@pytest.mark.parametrize("other", ["a->b.offset-syncs.topic.location = target",
                                   "a->b.offset-syncs.topic.replication.factor = 1",
                                   "offset-syncs.topic.replication.factor = 1",
                                   "a->b.offset-syncs-custom = x"])
def test_offset_syncs_keys_without_offset_syncs(other: str) -> None:
    error = config_error(f"a->b.enabled = true\na->b.emit.offset-syncs.enabled = false\n"
                         f"{other}\n")
    assert_names(error, "a->b.emit.offset-syncs.enabled", BASE_LINES + 2)
    assert other.split(" =")[0] in str(error)


def test_offset_syncs_rule_only_for_enabled_flows() -> None:
    settings = load("emit.offset-syncs.enabled = false\noffset-syncs.topic.location = target\n")
    assert not settings.flows["a->b"].emit_offset_syncs_enabled


def test_disabled_offset_syncs_alone_warns_about_checkpoints() -> None:
    settings = load("a->b.enabled = true\nemit.offset-syncs.enabled = false\n")
    assert not settings.flows["a->b"].emit_offset_syncs_enabled
    assert [w.key for w in settings.warnings] == ["emit.offset-syncs.enabled"]
    assert "checkpoints" in settings.warnings[0].message


def test_unknown_config_provider_class_is_an_error() -> None:
    """MM2 would load any Java class; Mirrorline runs only the three providers that ship with
    Kafka, and says so naming the class key."""
    error = config_error("config.providers = vault\n"
                         "config.providers.vault.class = com.example.VaultConfigProvider\n")
    assert_names(error, "config.providers.vault.class", BASE_LINES + 2)
    assert "FileConfigProvider" in str(error)


def test_error_without_source_and_with_source() -> None:
    text = BASE + "offset.lag.max = -3\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text, source="mm2.properties")
    assert str(info.value).startswith("mm2.properties:4: offset.lag.max: ")
    assert info.value.source == "mm2.properties"


# --- warnings -------------------------------------------------------------------------------


def test_unknown_keys_are_named() -> None:
    settings = load("""
        topcis = .*
        a->b.emit.checkpoint.interval.seconds = 5
        a.colour = blue
        mirrorline.future.setting = 1
        c.bootstrap.servers = c:1
    """)
    warnings = {w.key: w for w in settings.warnings}
    assert set(warnings) == {"topcis", "a->b.emit.checkpoint.interval.seconds", "a.colour",
                             "mirrorline.future.setting", "c.bootstrap.servers"}
    assert warnings["topcis"].line == BASE_LINES + 1
    assert "unknown key" in warnings["topcis"].message
    assert "Mirrorline setting" in warnings["mirrorline.future.setting"].message
    assert "not listed in clusters" in warnings["c.bootstrap.servers"].message
    assert "line 4: topcis: " in str(warnings["topcis"])
    assert {"mirrorline.deployment", "mirrorline.resume.tail.match"} <= MIRRORLINE_KEYS
    assert "mirrorline.grpc.tls.certificate" in MIRRORLINE_KEYS


def test_the_deployment_name_is_read_and_checked() -> None:
    assert load("mirrorline.deployment = eu-dr").deployment == "eu-dr"
    assert load("").deployment is None
    assert not [w for w in load("mirrorline.deployment = eu-dr").warnings
                if w.key == "mirrorline.deployment"]
    with pytest.raises(ConfigError) as err:
        load("mirrorline.deployment = eu dr")
    assert "mirrorline.deployment" in str(err.value)


@pytest.mark.parametrize("key", ["tasks.max", "key.converter", "value.converter.schemas.enable",
                                 "offset.storage.topic", "dedicated.mode.enable.internal.rest",
                                 "listeners", "a->b.tasks.max", "b.offset.storage.topic",
                                 "metric.reporters",
                                 "errors.tolerance", "transaction.boundary"])
def test_keys_without_effect(key: str) -> None:
    settings = load(f"{key} = x\n")
    assert [(w.key, w.message) for w in settings.warnings] == [
        (key, "accepted for MM2 compatibility; no effect in Mirrorline")]


@pytest.mark.parametrize("key", ["a.topics", "b.sync.topic.acls.enabled"])
def test_replication_setting_per_cluster_warns(key: str) -> None:
    settings = load(f"{key} = .*\n" if key.endswith("topics") else f"{key} = false\n")
    assert warning_keys(settings) == [key]
    assert "per cluster" in settings.warnings[0].message


def test_connection_key_per_flow_warns() -> None:
    settings = load("a->b.ssl.truststore.location = /x.pem\n")
    assert warning_keys(settings) == ["a->b.ssl.truststore.location"]
    assert "a->b.consumer.ssl.truststore.location" in settings.warnings[0].message


def test_used_keys_do_not_warn() -> None:
    settings = load("""
        a->b.sync.group.offsets.enabled = true
        security.protocol = PLAINTEXT
        sasl.mechanism = PLAIN
        ssl.endpoint.identification.algorithm =
        consumer.max.poll.records = 10
        a.producer.linger.ms = 1
        a->b.admin.request.timeout.ms = 1
        b.offset.flush.interval.ms = 10
        use.defaults.from = source
        config.properties.exclude = x
        replication.policy.separator = .
        admin.timeout.ms = 1
    """)
    assert settings.warnings == ()


def test_duplicate_keys_warn_with_both_lines() -> None:
    settings = load("offset.lag.max = 1\na->b.enabled = true\noffset.lag.max = 2\n")
    assert settings.flows["a->b"].offset_lag_max == 2
    (warning,) = settings.warnings
    assert warning.key == "offset.lag.max"
    assert "lines 4 and 6" in warning.message
    assert warning.line == 6


def test_duplicate_alias_warns() -> None:
    settings = load("", base=BASE.replace("a, b", "a, b, a"))
    assert list(settings.clusters) == ["a", "b"]
    assert warning_keys(settings) == ["clusters"]


# --- secrets --------------------------------------------------------------------------------

SECRET = "hunter2-do-not-print"


@pytest.mark.parametrize(("key", "hidden"), [
    ("ssl.key.password", True), ("a.ssl.truststore.password", True),
    ("b.producer.sasl.jaas.config", True), ("ssl.keystore.key", True),
    ("sasl.oauthbearer.client.credentials.client.secret", True),
    ("my.Password.field", True), ("ssl.keystore.certificate.chain", False),
    ("bootstrap.servers", False), ("topics", False),
])
def test_redact(key: str, hidden: bool) -> None:
    assert redact(key, SECRET) == ("[hidden]" if hidden else SECRET)


def test_secrets_never_appear_in_warnings_or_reprs() -> None:
    settings = load(f"""
        a.sasl.jaas.config = PlainLoginModule required password="{SECRET}";
        a.sasl.jaas.config = PlainLoginModule required password="{SECRET}";
        a->b.consumer.ssl.key.password = {SECRET}
        ssl.truststore.password = {SECRET}
        some.unknown.password = {SECRET}
        a.weird.secret = {SECRET}
    """)
    assert len(settings.warnings) == 3
    assert SECRET not in " ".join(str(w) for w in settings.warnings)
    assert SECRET not in repr(settings)
    assert settings.flows["a->b"].clients.source_consumer["ssl.key.password"] == SECRET


@pytest.mark.parametrize("line", [
    f"a->b.password.interval.seconds = {SECRET}",
    f"offset.lag.max.secret = ${{vault:{SECRET}}}",
    f"a.consumer.ssl.key.password = ${{env:{SECRET}}}",
])
def test_secrets_never_appear_in_errors(line: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(BASE + line + "\n")
    assert SECRET not in str(info.value)


def test_differences_are_sentences() -> None:
    assert len(DIFFERENCES_FROM_MM2) >= 5
    assert all(d.endswith(".") and "\n" not in d for d in DIFFERENCES_FROM_MM2)


# --- heartbeat service keys (canary, audit) -------------------------------------------------


def test_heartbeat_service_keys_are_read_per_flow() -> None:
    settings = flow("""
        canary.interval.ms = 200
        a->b.canary.latency.slo.ms = 750
        audit.window.ms = 2000
        a->b.audit.grace.ms = 0
        a->b.audit.enabled = false
        a->b.audit.missing.after.ms = 90000
    """)
    assert settings.canary == CanarySettings(enabled=True, interval_ms=200, latency_slo_ms=750)
    assert settings.audit == AuditSettings(enabled=False, window_ms=2000, grace_ms=0,
                                           missing_after_ms=90000)


@pytest.mark.parametrize(("key", "value", "problem"), [
    ("canary.interval.ms", "-5", "must not be negative"),
    ("canary.interval.ms", "0", "must be at least 1"),
    ("canary.latency.slo.ms", "0", "must be at least 1"),
    ("audit.window.ms", "0", "must be at least 1"),
    ("audit.grace.ms", "-1", "must not be negative"),
    ("audit.missing.after.ms", "-1", "must not be negative"),
    ("canary.enabled", "yes", "true or false"),
])
def test_bad_heartbeat_service_values_name_key_and_line(key: str, value: str,
                                                        problem: str) -> None:
    error = config_error(f"{key} = {value}\n")
    assert_names(error, key, BASE_LINES + 1)
    assert problem in str(error)


def test_audit_window_shorter_than_canary_interval_is_an_error() -> None:
    error = config_error("canary.interval.ms = 5000\na->b.audit.window.ms = 1000\n")
    assert_names(error, "a->b.audit.window.ms", BASE_LINES + 2)
    assert "shorter than canary.interval.ms" in str(error)
