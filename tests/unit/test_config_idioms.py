"""MM2 idioms real properties files use, read with MM2's meaning (issue 9).

Each test's docstring states what MM2 does with the idiom; the test checks Mirrorline does the
same and says what it should (warnings), and that secrets resolved by config providers never
show up where a value is printed.
"""

from __future__ import annotations

import os
from pathlib import Path
from textwrap import dedent

import pytest

from mirrorline.cli import main
from mirrorline.cli.services import VALIDATED_ENV, load_settings
from mirrorline.configfile import parse_config
from mirrorline.core.errors import ConfigError
from mirrorline.core.flowdefs import file_definitions
from mirrorline.core.policy import is_cycle, make_policy
from mirrorline.core.settings import MirrorSettings
from mirrorline.kafka import tls
from mirrorline.kafka.preflight import check_clients

BASE = "clusters = a, b\na.bootstrap.servers = a1:9092\nb.bootstrap.servers = b1:9092\n"
BASE_LINES = 3
PROVIDERS = dedent("""\
    config.providers = env, file, dir
    config.providers.env.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider
    config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider
    config.providers.dir.class = org.apache.kafka.common.config.provider.DirectoryConfigProvider
    """)


def load(extra: str) -> MirrorSettings:
    return parse_config(BASE + dedent(extra).lstrip("\n"))


def error(extra: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(extra)
    return info.value


def messages(settings: MirrorSettings, key: str) -> list[str]:
    return [w.message for w in settings.warnings if w.key == key]


# --- empty separator -----------------------------------------------------------------------


def test_empty_separator_names_remote_topics_alias_plus_topic_and_warns() -> None:
    """MM2: `replication.policy.separator =` is present, so DefaultReplicationPolicy uses ""
    -- `a` + "" + `orders` = `aorders` on the target. Mirrorline accepts it and warns that
    loops are no longer prevented, suggesting the identity policy."""
    settings = load("a->b.enabled = true\nreplication.policy.separator =\n")
    flow = settings.flows["a->b"]
    assert flow.policy.separator == ""
    policy = make_policy(flow.policy, flow.naming_source)
    assert policy.format_remote_topic(flow.naming_source, "orders") == "aorders"
    (message,) = messages(settings, "replication.policy.separator")
    assert "aorders" in message
    assert "loops" in message
    assert "IdentityReplicationPolicy" in message


def test_empty_separator_with_empty_cluster_aliases_keeps_topic_names() -> None:
    """MM2's pre-identity-policy idiom: with `source.cluster.alias =` too, the connector's
    source alias is "" (dedicated mode fills in the flow's alias only when the key is absent),
    so a remote topic is "" + "" + `orders` = `orders`; internal topics lose their dots
    (`checkpointsinternal`), and no topic is ever seen as coming from the target."""
    settings = load("""
        a->b.enabled = true
        replication.policy.separator =
        source.cluster.alias =
        target.cluster.alias =
    """)
    flow = settings.flows["a->b"]
    assert (flow.naming_source, flow.naming_target) == ("", "")
    policy = make_policy(flow.policy, flow.naming_source)
    assert policy.format_remote_topic(flow.naming_source, "orders") == "orders"
    assert policy.checkpoints_topic(flow.naming_source) == "checkpointsinternal"
    assert policy.offset_syncs_topic(flow.naming_target) == "mm2-offset-syncsinternal"
    assert not is_cycle(policy, "orders", flow.naming_target)
    assert not [w for w in settings.warnings if "alias" in w.key]


# --- source.cluster.alias / target.cluster.alias -------------------------------------------


def test_cluster_alias_keys_change_topic_names_without_unknown_key_warnings() -> None:
    """MM2 keeps top-level `source.cluster.alias` in every connector config and a flow-level
    one overrides it, so remote topics are named after that alias (`east.orders`), the
    checkpoints topic too, and cycle detection compares against `target.cluster.alias`."""
    settings = load("""
        a->b.enabled = true
        source.cluster.alias = east
        a->b.target.cluster.alias = west
    """)
    flow = settings.flows["a->b"]
    assert (flow.naming_source, flow.naming_target) == ("east", "west")
    policy = make_policy(flow.policy, flow.naming_source)
    assert policy.format_remote_topic(flow.naming_source, "orders") == "east.orders"
    assert policy.checkpoints_topic(flow.naming_source) == "east.checkpoints.internal"
    assert is_cycle(policy, "west.orders", flow.naming_target)
    assert settings.flows["b->a"].naming_target == "a"
    assert all("ignore it silently" not in w.message for w in settings.warnings)
    assert not messages(settings, "source.cluster.alias")


def test_cluster_level_alias_key_is_reported_as_without_effect() -> None:
    """MM2 turns `a.source.cluster.alias` into the worker key `source.cluster.source...`:
    no effect. Mirrorline says where the key does work."""
    settings = load("a.source.cluster.alias = east\n")
    (message,) = messages(settings, "a.source.cluster.alias")
    assert "top level or per flow" in message


def test_alias_key_containing_the_separator_names_that_key() -> None:
    e = error("a->b.enabled = true\nsource.cluster.alias = us.east\n")
    assert e.key == "source.cluster.alias"
    assert e.line == BASE_LINES + 2


# --- deprecated blacklist keys -------------------------------------------------------------


@pytest.mark.parametrize(("old", "new", "field"), [
    ("topics.blacklist", "topics.exclude", "topics_exclude"),
    ("groups.blacklist", "groups.exclude", "groups_exclude"),
    ("config.properties.blacklist", "config.properties.exclude", "config_properties_exclude"),
])
def test_deprecated_blacklist_keys_mean_the_exclude_list(old: str, new: str, field: str) -> None:
    """MM2 (KIP-629) still reads `*.blacklist` as the exclude list when the new key is
    absent, logging a deprecation warning."""
    settings = load(f"a->b.enabled = true\n{old} = secret.*, tmp\n")
    assert getattr(settings.flows["a->b"], field) == ("secret.*", "tmp")
    (message,) = messages(settings, old)
    assert new in message and "deprecated" in message


def test_empty_blacklist_excludes_nothing() -> None:
    """MM2: an empty list compiles to a pattern that matches nothing, so `topics.blacklist =`
    replicates even the topics the default exclude list would skip."""
    settings = load("a->b.enabled = true\ntopics.blacklist =\n")
    assert settings.flows["a->b"].topics_exclude == ()
    assert "excludes nothing" in messages(settings, "topics.blacklist")[0]


def test_new_exclude_key_wins_over_the_deprecated_one_at_any_level() -> None:
    """MM2 merges top-level and flow-level keys into one connector config and then lets the
    new key win over its deprecated alias."""
    settings = load("a->b.enabled = true\ntopics.exclude = x\na->b.topics.blacklist = y\n")
    assert settings.flows["a->b"].topics_exclude == ("x",)
    assert "ignored" in messages(settings, "a->b.topics.blacklist")[0]


def test_whitelist_keys_were_never_mm2_keys() -> None:
    """MM2's include list has always been `topics`; `topics.whitelist` is dropped silently by
    MM2. Mirrorline also ignores it, but says so and names `topics`."""
    settings = load("a->b.enabled = true\ntopics.whitelist = orders\n")
    assert settings.flows["a->b"].topics == (".*",)
    assert "write topics instead" in messages(settings, "topics.whitelist")[0]


def test_deprecated_key_reaches_the_control_log_as_the_new_key() -> None:
    settings = load("a->b.enabled = true\ntopics.blacklist = tmp.*\n")
    assert file_definitions(settings)["a->b"].properties["topics.exclude"] == "tmp.*"


# --- no inline comments --------------------------------------------------------------------


@pytest.mark.parametrize("value", ["false # passive", "true # active"])
def test_flow_switch_with_a_comment_is_false_and_warned(value: str) -> None:
    """Java properties have no inline comments: the value is `true # active`, and MM2's
    dedicated mode decides with Boolean.parseBoolean, which is false for anything but
    `true` -- the flow is off. Mirrorline does the same and warns loudly."""
    settings = load(f"a->b.enabled = {value}\n")
    assert not settings.flows["a->b"].enabled
    (message,) = messages(settings, "a->b.enabled")
    assert "FALSE" in message and "inline comments" in message


def test_pattern_with_a_comment_keeps_it_and_warns() -> None:
    """MM2 compiles `orders.* # all` as a regex whose text includes ` # all`."""
    settings = load("a->b.enabled = true\ntopics = orders.* # all\n")
    assert settings.flows["a->b"].topics == ("orders.* # all",)
    assert "regular expression" in messages(settings, "topics")[0]


def test_number_with_a_comment_is_an_error_as_in_mm2() -> None:
    """MM2's ConfigDef rejects `100 # default` for a LONG; Mirrorline too, explaining why."""
    e = error("offset.lag.max = 100 # default\n")
    assert e.key == "offset.lag.max"
    assert "inline comments" in str(e)


def test_comment_in_a_secret_is_warned_without_showing_it() -> None:
    settings = load("a.ssl.key.password = hunter2 # old\n")
    (message,) = messages(settings, "a.ssl.key.password")
    assert "hunter2" not in message


# --- config providers ----------------------------------------------------------------------


def test_providers_resolve_env_file_and_directory(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka's providers: `${env:VAR}` is an environment variable, `${file:PATH:KEY}` a key of
    a properties file, `${dir:DIR:NAME}` the content of a file in a directory (a mounted
    Kubernetes secret)."""
    monkeypatch.setenv("W9_KEY_PASSWORD", "env-secret-1")
    (tmp_path / "creds.properties").write_text("password = file-secret-2\n")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "truststore-password").write_text("dir-secret-3")
    settings = load(PROVIDERS + f"""
a.security.protocol = SSL
a.ssl.key.password = ${{env:W9_KEY_PASSWORD}}
a.sasl.jaas.config = x required password="${{file:{tmp_path}/creds.properties:password}}";
a.ssl.truststore.password = ${{dir:{tmp_path}/secrets:truststore-password}}
a->b.enabled = true
""")
    connection = settings.clusters["a"].connection
    assert connection["ssl.key.password"] == "env-secret-1"
    assert connection["sasl.jaas.config"] == 'x required password="file-secret-2";'
    assert connection["ssl.truststore.password"] == "dir-secret-3"
    shown = repr(settings)
    for secret in ("env-secret-1", "file-secret-2", "dir-secret-3"):
        assert secret not in shown
    # The control log gets the reference, never the resolved value.
    assert settings.raw["a.ssl.key.password"] == "${env:W9_KEY_PASSWORD}"


def test_resolved_non_secret_keys_are_masked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("W9_BOOT", "hidden-host:9092")
    settings = load(PROVIDERS + "b.bootstrap.servers = ${env:W9_BOOT}\na->b.enabled = true\n")
    assert settings.clusters["b"].bootstrap_servers == "hidden-host:9092"
    assert "hidden-host" not in repr(settings.flows["a->b"].clients)


def test_flow_definitions_keep_references_not_values(tmp_path: Path) -> None:
    """What the controller seeds into the control log from the file must not hold secrets."""
    (tmp_path / "t.properties").write_text("topics = orders\n")
    settings = load(PROVIDERS + f"a->b.enabled = true\ntopics = ${{file:{tmp_path}/"
                                "t.properties:topics}\n")
    assert settings.flows["a->b"].topics == ("orders",)
    assert file_definitions(settings)["a->b"].properties["topics"].startswith("${file:")


def test_unset_variable_is_an_error_naming_key_and_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka would leave `${env:NOPE}` in the value and fail later at the broker; Mirrorline
    stops at start naming the key and line."""
    monkeypatch.delenv("W9_NOPE", raising=False)
    e = error(PROVIDERS + "a.ssl.key.password = ${env:W9_NOPE}\n")
    assert e.key == "a.ssl.key.password"
    assert e.line == BASE_LINES + 5
    assert "W9_NOPE" in str(e)


def test_undeclared_provider_is_an_error() -> None:
    """Kafka resolves only providers listed in `config.providers`."""
    e = error("a.ssl.key.password = ${vault:secret/x:pw}\n")
    assert e.key == "a.ssl.key.password"
    assert "config.providers" in str(e)


def test_file_provider_allowed_paths(tmp_path: Path) -> None:
    """Kafka's `allowed.paths` parameter confines the file provider to some directories."""
    (tmp_path / "c.properties").write_text("pw = x\n")
    e = error(PROVIDERS + "config.providers.file.param.allowed.paths = /nonexistent\n"
              f"a.ssl.key.password = ${{file:{tmp_path}/c.properties:pw}}\n")
    assert "allowed.paths" in str(e)


# --- keys that work are not called ineffective -----------------------------------------------


@pytest.mark.parametrize("line", [
    "sync.topic.acls.enabled = false", "sync.topic.acls.interval.seconds = 30",
    "sync.topic.configs.enabled = false", "sync.topic.configs.interval.seconds = 30",
    "emit.heartbeats.enabled = false", "emit.heartbeats.interval.seconds = 5",
    "heartbeats.topic.replication.factor = 1"])
def test_keys_of_shipped_features_draw_no_warning(line: str) -> None:
    """Heartbeats, topic-config sync and ACL sync ship and work: their keys are not reported
    as having no effect (they once were, from a hand-kept list that had rotted)."""
    settings = load(line + "\n")
    assert messages(settings, line.split(" = ")[0]) == []


# --- preflight: client settings and TLS stores ---------------------------------------------


def test_missing_truststore_names_the_prefixed_key_and_line(tmp_path: Path) -> None:
    settings = load(f"""
        a->b.enabled = true
        b.security.protocol = SSL
        b.ssl.truststore.location = {tmp_path}/missing.p12
        b.ssl.truststore.type = PKCS12
    """)
    with pytest.raises(ConfigError) as info:
        check_clients(settings)
    assert info.value.key == "b.ssl.truststore.location"
    assert info.value.line == BASE_LINES + 3


def test_jks_default_type_names_the_prefixed_key(tmp_path: Path) -> None:
    """A type-less store is JKS, as in Kafka; a broken one is named as written in the file."""
    if tls.keytool() is None:
        pytest.skip("needs the JDK's keytool")
    store = tmp_path / "trust.jks"
    store.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    settings = load(f"a->b.enabled = true\na.security.protocol = SSL\n"
                    f"a.ssl.truststore.location = {store}\n")
    with pytest.raises(ConfigError) as info:
        check_clients(settings)
    assert info.value.key == "a.ssl.truststore.location"
    assert "not a JKS store" in str(info.value)


# --- config check, --version, warnings once ------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mm2.properties"
    path.write_text(BASE + dedent(text).lstrip("\n"))
    return path


def test_config_check_prints_flows_naming_and_masked_clients(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("W9_PW", "pw-that-must-not-show")
    path = write(tmp_path, PROVIDERS + """
        a->b.enabled = true
        a->b.topics = orders.*
        topics.blacklist = tmp.*
        replication.policy.separator = _
        a.security.protocol = SASL_PLAINTEXT
        a.sasl.mechanism = PLAIN
        a.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule \\
            required username="u" password="${env:W9_PW}";
    """)
    assert main(["config", "check", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "a->b:" in out
    assert "topics: orders.*" in out
    assert "topics.exclude: tmp.*" in out
    assert "orders on a -> a_orders on b" in out
    assert "a_checkpoints_internal" in out
    assert "sasl.jaas.config = [hidden]" in out
    assert "pw-that-must-not-show" not in out + err
    assert "topics.blacklist" in err  # the deprecation warning


def test_config_check_exits_2_on_errors(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "a->b.enabled = true\noffset.lag.max = -1\n")
    assert main(["config", "check", str(path)]) == 2
    assert "offset.lag.max" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from mirrorline import __version__

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"mirrorline {__version__}"


def test_services_started_by_run_do_not_repeat_warnings(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`run` prints the file's warnings and marks the file validated for its children."""
    path = write(tmp_path, "a->b.enabled = true\ntopics.blacklist = x\n")
    assert load_settings(str(path)) is not None
    assert "topics.blacklist" in capsys.readouterr().err
    monkeypatch.setenv(VALIDATED_ENV, os.path.abspath(path))
    assert load_settings(str(path)) is not None
    assert capsys.readouterr().err == ""


def test_client_settings_without_effect_are_reported_once_by_the_check(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    """A Java client setting aiokafka has no equivalent for is named (as written, with its
    line) by the check `run` makes, and the clients built afterwards do not log it again --
    so it is not repeated by every service."""
    import logging

    from mirrorline.kafka.clients import build, producer_kwargs

    path = write(tmp_path, "a->b.enabled = true\nb.producer.buffer.memory = 1000\n")
    assert load_settings(str(path)) is not None
    err = capsys.readouterr().err
    assert f"line {BASE_LINES + 2}: b.producer.buffer.memory: a client setting with no " \
           "effect" in err
    with caplog.at_level(logging.WARNING):
        build(producer_kwargs, {"bootstrap.servers": "b1:9092", "buffer.memory": "1000"}, "x")
    assert "buffer.memory" not in caplog.text


def test_config_check_hides_filters_that_came_from_a_provider(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every resolved value is treated as a secret, even a topic list."""
    (tmp_path / "t.properties").write_text("topics = classified-.*\n")
    path = write(tmp_path, PROVIDERS + f"a->b.enabled = true\n"
                                       f"a->b.topics = ${{file:{tmp_path}/t.properties:topics}}\n")
    assert main(["config", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "topics: [hidden]" in out and "classified" not in out
