"""Filters: LIST parsing, Java regex handling, topic selection and config sync (DefaultTopicFilter,
DefaultConfigPropertyFilter)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirrorline.core.errors import ConfigError
from mirrorline.core.filters import (
    DEFAULT_CONFIG_PROPERTIES_EXCLUDE,
    DEFAULT_GROUPS,
    DEFAULT_GROUPS_EXCLUDE,
    DEFAULT_TOPICS,
    DEFAULT_TOPICS_EXCLUDE,
    ConfigEntry,
    ConfigOp,
    ConfigPropertyFilter,
    ConfigSource,
    GroupFilter,
    NameFilter,
    TopicFilter,
    compile_patterns,
    config_sync_ops,
    configs_for_new_topic,
    parse_list,
    should_replicate_topic,
)
from mirrorline.core.policy import DefaultReplicationPolicy, IdentityReplicationPolicy

# --- LIST parsing (ConfigDef.Type.LIST) -----------------------------------------------------------

@pytest.mark.parametrize(("value", "items"), [
    ("", ()),
    ("   ", ()),
    ("topic1", ("topic1",)),
    ("topic1, topic2", ("topic1", "topic2")),
    (" a ,b,\tc ", ("a", "b", "c")),
    ("a,", ("a", "")),
    ("a, ,", ("a", "", "")),
    (",a", ("", "a")),
    (",", ("", "")),
    ("a\u00a0,b", ("a\u00a0", "b")),  # Java's \s and trim() are ASCII-only
])
def test_parse_list(value: str, items: tuple[str, ...]) -> None:
    assert parse_list(value) == items


def test_parse_list_trims_control_characters_like_java_trim() -> None:
    assert parse_list("\x00a,b\x1f") == ("a", "b")


@given(st.lists(st.text(alphabet="abc.*_-", min_size=1, max_size=6), min_size=1, max_size=5))
def test_parse_list_inverts_comma_join(items: list[str]) -> None:
    assert parse_list(", ".join(items)) == tuple(items)


# --- defaults (MirrorSourceConfig, MirrorCheckpointConfig) ----------------------------------------

def test_default_lists_are_mm2s() -> None:
    assert DEFAULT_TOPICS == (".*",)
    assert DEFAULT_TOPICS_EXCLUDE == (r".*[\-\.]internal", r".*\.replica", "__.*")
    assert DEFAULT_GROUPS == (".*",)
    assert DEFAULT_GROUPS_EXCLUDE == ("console-consumer-.*", "connect-.*", "__.*")
    assert DEFAULT_CONFIG_PROPERTIES_EXCLUDE == (
        r"follower\.replication\.throttled\.replicas",
        r"leader\.replication\.throttled\.replicas",
        r"message\.timestamp\.difference\.max\.ms",
        r"message\.timestamp\.type",
        r"unclean\.leader\.election\.enable",
        r"min\.insync\.replicas",
    )


# --- pattern compilation ---------------------------------------------------------------------

def test_empty_list_compiles_to_none() -> None:
    assert compile_patterns([], key="topics") is None


def test_patterns_are_joined_without_grouping() -> None:
    pattern = compile_patterns(["a", "b.*"], key="topics")
    assert pattern is not None
    assert pattern.pattern == "a|b.*"


def test_inline_flag_applies_to_later_items_like_java() -> None:
    pattern = compile_patterns(["orders", "(?i)audit.*", "logs"], key="topics")
    assert pattern is not None
    assert pattern.fullmatch("orders")
    assert not pattern.fullmatch("ORDERS")
    assert pattern.fullmatch("AUDIT-1")
    assert pattern.fullmatch("LOGS")  # Java: the flag holds to the end of the pattern


def test_inline_flag_scope_ends_with_enclosing_group() -> None:
    pattern = compile_patterns(["(a(?i)b|c)d"], key="topics")
    assert pattern is not None
    assert pattern.fullmatch("aBd")
    assert pattern.fullmatch("Cd")
    assert not pattern.fullmatch("aBD")
    assert not pattern.fullmatch("Abd")


def test_inline_flag_turning_off() -> None:
    pattern = compile_patterns(["(?i)a(?-i)b"], key="topics")
    assert pattern is not None
    assert pattern.fullmatch("Ab")
    assert not pattern.fullmatch("AB")


def test_named_groups_are_translated() -> None:
    pattern = compile_patterns([r"(?<x>ab)-(?:cd)"], key="groups")
    assert pattern is not None
    assert pattern.fullmatch("ab-cd")
    assert not pattern.fullmatch("ab-ab")


@pytest.mark.parametrize(("java", "name"), [
    (r"\0101", "A"),        # \0 + three octal digits (first <= 3)
    (r"\0777", "?7"),       # first digit > 3: only two digits belong to the escape
    (r"\07", "\x07"),
    (r"[\0101]", "A"),
])
def test_java_octal_escapes(java: str, name: str) -> None:
    pattern = compile_patterns([java], key="topics")
    assert pattern is not None
    assert pattern.fullmatch(name)


def test_matching_is_ascii_like_java() -> None:
    digits = compile_patterns([r"\d+"], key="groups")
    words = compile_patterns([r"\w+"], key="groups")
    caseless = compile_patterns([r"(?i)k.*s"], key="groups")
    spaces = compile_patterns([r"a\sb"], key="groups")
    assert digits is not None and words is not None and caseless is not None
    assert spaces is not None
    assert digits.fullmatch("123")
    assert not digits.fullmatch("\u0661\u0662")   # Arabic-Indic digits
    assert not words.fullmatch("caf\u00e9")
    assert caseless.fullmatch("Kafkas")
    # Java folds case for ASCII only: the Kelvin sign and the long s are not k and s.
    assert not caseless.fullmatch("\u212aafkas")
    assert not caseless.fullmatch("kafka\u017f")
    assert spaces.fullmatch("a\x0bb")             # Java's \s includes the vertical tab
    with pytest.raises(ConfigError, match="non-ASCII letter case-insensitively"):
        compile_patterns([r"(?i)\u00e9"], key="groups")


@pytest.mark.parametrize(("java", "name"), [
    (r"a{1,3}", "aaa"), (r"a{2}", "aa"), (r"a{2,}", "aaaa"), (r"[]a]+", "]a"),
    (r"[^]a]", "b"), (r"(?i:A)b", "ab"), (r"\N{LATIN SMALL LETTER A}", "a"),
    (r"\u0041+", "AA"), (r"[\N{LATIN SMALL LETTER A}-c]+", "abc"),
])
def test_supported_java_constructs(java: str, name: str) -> None:
    pattern = compile_patterns([java], key="topics")
    assert pattern is not None
    assert pattern.fullmatch(name)


@pytest.mark.parametrize(("pattern", "fragment"), [
    (r"\p{L}+", r"\p{...}"),
    (r"\P{L}", r"\P{...}"),
    (r"\Qa.b\E", r"\Q...\E"),
    (r"a\h", r"\h"),
    (r"a\R", r"\R"),
    (r"\X", r"\X"),
    (r"abc\z", r"\z"),
    (r"\v", r"\v"),
    (r"\Gx", r"\G"),
    (r"\e", r"\e"),
    (r"\cA", r"\cX"),
    (r"\x{41}", r"\x{...}"),
    (r"\b{g}", r"\b{g}"),
    (r"[\p{Lu}]", r"\p{...}"),
    (r"[a-z&&[^e]]", "&&"),
    (r"[a-z[^e]]", "nests"),
    (r"[a&&b]", "&&"),
    (r"[[:alpha:]]", "nests"),
    (r"a{1", "quantifier"),
    (r"3}|{x", "quantifier"),
    (r"a{,3}", "quantifier"),
    (r"(?x)a b", "COMMENTS"),
    (r"(?u)a", "UNICODE_CASE"),
    (r"(?d)a", "UNIX_LINES"),
    (r"(?U)a", "UNICODE_CHARACTER_CLASS"),
    (r"(?a)a", "unknown inline flag"),
    (r"(?P<n>a)", "Python-only"),
    (r"(?#c)a", "Python-only"),
    (r"\U0001F600", r"\U"),
    (r"(?<1x>a)", "named group"),
    (r"\k<x", "back-reference"),
    (r"\09", "octal"),
    # Constructs that need a backtracking matcher (exponential in the worst case).
    (r"a*+", "backtracking"),
    (r"x{1}+", "backtracking"),
    (r"(?>a+)b", "backtracking"),
    (r"(?<=a)b|a", "backtracking"),
    (r"(?<!x)b", "backtracking"),
    (r"(?=a)a", "backtracking"),
    (r"(?<x>ab)-\k<x>", "backtracking"),
    (r"(a)\1", "backtracking"),
    (r"a\Z", "backtracking"),
])
def test_java_only_or_ambiguous_constructs_are_rejected(pattern: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        compile_patterns(["ok", pattern], key="topics.exclude")
    assert info.value.key == "topics.exclude"
    assert repr(pattern) in info.value.message
    assert fragment in info.value.message


@pytest.mark.parametrize("pattern", ["(a", "a)", "*a", "[a", "a\\", "(?<=a+)b"])
def test_invalid_regex_names_the_pattern(pattern: str) -> None:
    with pytest.raises(ConfigError) as info:
        compile_patterns(["fine.*", pattern], key="groups")
    assert info.value.key == "groups"
    assert f"pattern {pattern!r}" in info.value.message


def test_list_split_inside_a_regex_is_rejected() -> None:
    # `topics = (a, b)` splits into "(a" and "b)"; refuse rather than guess.
    with pytest.raises(ConfigError, match=r"'\(a'"):
        compile_patterns(parse_list("(a, b)"), key="topics")


def test_patterns_that_conflict_only_when_joined() -> None:
    with pytest.raises(ConfigError, match="do not combine"):
        compile_patterns(["(?<x>a)", "(?<x>b)"], key="topics")


def test_escaped_specials_are_not_mistaken_for_constructs() -> None:
    pattern = compile_patterns([r"a\\p", r"x\{1", r"\[a\]", r"\(\?P"], key="topics")
    assert pattern is not None
    assert pattern.fullmatch("a\\p")
    assert pattern.fullmatch("x{1")
    assert pattern.fullmatch("[a]")
    assert pattern.fullmatch("(?P")


# --- name filters -----------------------------------------------------------------

def test_topic_filter_defaults() -> None:
    flt = TopicFilter()
    assert flt.accepts("orders")
    assert flt.accepts("primary.orders")
    for rejected in ["__consumer_offsets", "mm2-offsets.a.internal", "x-internal",
                     "orders.replica"]:
        assert not flt.accepts(rejected), rejected


def test_group_filter_defaults() -> None:
    flt = GroupFilter()
    assert flt.accepts("group1")
    for rejected in ["console-consumer-123", "connect-mirror", "__internal"]:
        assert not flt.accepts(rejected), rejected


def test_empty_topics_matches_nothing() -> None:
    flt = TopicFilter(parse_list(""), ())
    assert not flt.accepts("topic1")
    assert not flt.accepts("")


def test_explicit_topic_list_matches_exactly() -> None:
    flt = TopicFilter(parse_list("topic1, topic2"))
    assert flt.accepts("topic1")
    assert flt.accepts("topic2")
    assert not flt.accepts("topic3")
    assert not flt.accepts("topic10")   # whole-name match
    assert not flt.accepts("xtopic1")


def test_dot_star_matches_everything_not_excluded() -> None:
    flt = TopicFilter(parse_list(".*"), ())
    assert flt.accepts("anything")
    assert flt.accepts("__consumer_offsets")


def test_exclude_wins_over_include() -> None:
    flt = NameFilter(["orders.*"], ["orders-private"], include_key="i", exclude_key="e")
    assert flt.accepts("orders-public")
    assert not flt.accepts("orders-private")


def test_filter_errors_name_their_key() -> None:
    with pytest.raises(ConfigError) as info:
        GroupFilter((".*",), (r"\p{L}",))
    assert info.value.key == "groups.exclude"
    with pytest.raises(ConfigError) as info:
        TopicFilter(("(",))
    assert info.value.key == "topics"


# --- should_replicate_topic (MirrorSourceConnector.shouldReplicateTopic) --------------------------

NOTHING = NameFilter([], [], include_key="topics", exclude_key="topics.exclude")
EVERYTHING = NameFilter([".*"], [], include_key="topics", exclude_key="topics.exclude")


def _replicates(topic: str, *, policy: DefaultReplicationPolicy | None = None,
                flt: NameFilter = EVERYTHING, heartbeats: bool = True) -> bool:
    return should_replicate_topic(
        topic, policy=policy or DefaultReplicationPolicy(), topic_filter=flt,
        target_alias="target", heartbeats_replication_enabled=heartbeats, canary_enabled=True)


def test_heartbeats_bypass_the_filter_when_enabled() -> None:
    assert _replicates("heartbeats", flt=NOTHING)
    assert _replicates("us-west.heartbeats", flt=NOTHING)
    assert not _replicates("orders", flt=NOTHING)


def test_heartbeats_with_underscore_separator() -> None:
    policy = DefaultReplicationPolicy("_")
    assert _replicates("heartbeats", policy=policy, flt=NOTHING)
    assert not _replicates("us-west.heartbeats", policy=policy, flt=NOTHING)


def test_heartbeats_flag_off() -> None:
    assert not _replicates("heartbeats", flt=NOTHING, heartbeats=False)
    assert not _replicates("us-west.heartbeats", flt=NOTHING, heartbeats=False)
    assert _replicates("heartbeats", flt=EVERYTHING, heartbeats=False)
    assert _replicates("us-west.heartbeats", flt=EVERYTHING, heartbeats=False)


@pytest.mark.parametrize(("topic", "expected"), [
    ("topic1", True),
    ("source.topic1", True),
    ("target.topic1", False),
    ("target.source.topic1", False),
    ("source.target.topic1", False),
    ("target.source.target.topic1", False),
    ("source.target.source.topic1", False),
    ("__consumer_offsets", False),
    ("mm2-offset-syncs.target.internal", False),
    ("target.heartbeats", False),
])
def test_default_policy_replication(topic: str, expected: bool) -> None:
    assert _replicates(topic) is expected


@pytest.mark.parametrize("topic", [
    "target.topic1", "target.source.topic1", "source.target.topic1",
    "target.source.target.topic1", "source.target.source.topic1", "topic1",
    "othersource.topic1", "heartbeats", "othersource.heartbeats",
])
def test_identity_policy_replicates(topic: str) -> None:
    policy = IdentityReplicationPolicy(source_cluster_alias="source")
    assert _replicates(topic, policy=policy)


@pytest.mark.parametrize("topic", [
    "target.heartbeats", "target.source.heartbeats", "source.target.heartbeats",
    "target.source.target.heartbeats", "source.target.source.heartbeats",
])
def test_identity_policy_refuses_heartbeat_cycles(topic: str) -> None:
    policy = IdentityReplicationPolicy(source_cluster_alias="source")
    assert not _replicates(topic, policy=policy)


# --- config sync (DefaultConfigPropertyFilter) ----------------------------------------------------

def _entries() -> list[ConfigEntry]:
    return [
        ConfigEntry("name-1", "value-1", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ConfigEntry("name-2", "value-2", ConfigSource.DEFAULT_CONFIG),
        ConfigEntry("min.insync.replicas", "2", ConfigSource.DYNAMIC_TOPIC_CONFIG),
    ]


def test_config_source_codes() -> None:
    assert [(s.name, int(s)) for s in ConfigSource] == [
        ("UNKNOWN", 0), ("DYNAMIC_TOPIC_CONFIG", 1), ("DYNAMIC_BROKER_CONFIG", 2),
        ("DYNAMIC_DEFAULT_BROKER_CONFIG", 3), ("STATIC_BROKER_CONFIG", 4),
        ("DEFAULT_CONFIG", 5), ("DYNAMIC_BROKER_LOGGER_CONFIG", 6),
        ("CLIENT_METRICS_CONFIG", 7), ("GROUP_CONFIG", 8),
    ]


def test_default_property_filter() -> None:
    flt = ConfigPropertyFilter()
    assert not flt.should_replicate_config_property("min.insync.replicas")
    assert not flt.should_replicate_config_property("message.timestamp.type")
    assert flt.should_replicate_config_property("retention.ms")
    assert flt.should_replicate_config_property("min_insync_replicas")  # dots are escaped
    assert not flt.should_replicate_source_default("retention.ms")
    assert ConfigPropertyFilter(use_defaults_from="source").should_replicate_source_default("x")


def test_incremental_mode_keeps_default_entries() -> None:
    ops = config_sync_ops(_entries(), ConfigPropertyFilter())
    assert ops == [ConfigOp("name-1", "set", "value-1"), ConfigOp("name-2", "delete", None)]


def test_incremental_mode_with_source_defaults_sets_them() -> None:
    ops = config_sync_ops(_entries(), ConfigPropertyFilter(use_defaults_from="source"))
    assert ops == [ConfigOp("name-1", "set", "value-1"), ConfigOp("name-2", "set", "value-2")]


def test_creation_mode_drops_defaults_unless_from_source() -> None:
    assert configs_for_new_topic(_entries(), ConfigPropertyFilter()) == {"name-1": "value-1"}
    assert configs_for_new_topic(_entries(), ConfigPropertyFilter(use_defaults_from="source")) \
        == {"name-1": "value-1", "name-2": "value-2"}


def test_custom_exclude_list_at_creation() -> None:
    exclude = parse_list(
        r"follower\.replication\.throttled\.replicas, leader\.replication\.throttled\.replicas,"
        r" message\.timestamp\.difference\.max\.ms, message\.timestamp\.type,"
        r" unclean\.leader\.election\.enable, min\.insync\.replicas,exclude_param.*")
    entries = [
        ConfigEntry("name-1", "value-1", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ConfigEntry("exclude_param.param1", "value-param1", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ConfigEntry("min.insync.replicas", "2", ConfigSource.DYNAMIC_TOPIC_CONFIG),
    ]
    assert configs_for_new_topic(entries, ConfigPropertyFilter(exclude)) == {"name-1": "value-1"}


def test_read_only_sensitive_and_static_entries_never_sync() -> None:
    entries = [
        ConfigEntry("ro", "1", ConfigSource.DYNAMIC_TOPIC_CONFIG, read_only=True),
        ConfigEntry("secret", "2", ConfigSource.DYNAMIC_TOPIC_CONFIG, sensitive=True),
        ConfigEntry("static", "3", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigEntry("kept", "4", ConfigSource.DYNAMIC_TOPIC_CONFIG),
    ]
    for use in ("source", "target"):
        flt = ConfigPropertyFilter(use_defaults_from=use)
        assert configs_for_new_topic(entries, flt) == {"kept": "4"}
        assert config_sync_ops(entries, flt) == [ConfigOp("kept", "set", "4")]


def test_dynamic_broker_defaults_are_copied_as_explicit_configs() -> None:
    # MM2 quirk: only DEFAULT_CONFIG counts as a default.
    entries = [ConfigEntry("retention.ms", "1000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]
    assert configs_for_new_topic(entries, ConfigPropertyFilter()) == {"retention.ms": "1000"}
    assert config_sync_ops(entries, ConfigPropertyFilter()) == [
        ConfigOp("retention.ms", "set", "1000")]


def test_integration_scenario_exclusion_keeps_target_override() -> None:
    flt = ConfigPropertyFilter(parse_list(r"delete\.retention\..*"))
    source = [
        ConfigEntry("delete.retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ConfigEntry("retention.bytes", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
    ]
    assert configs_for_new_topic(source, flt) == {"retention.bytes": "1000"}
    assert config_sync_ops(source, flt) == [ConfigOp("retention.bytes", "set", "1000")]
    # The source override of retention.bytes is removed: the target falls back to its default.
    source[1] = ConfigEntry("retention.bytes", "-1", ConfigSource.DEFAULT_CONFIG)
    assert config_sync_ops(source, flt) == [ConfigOp("retention.bytes", "delete", None)]


def test_null_values_are_not_sent() -> None:
    entries = [ConfigEntry("x", None, ConfigSource.DYNAMIC_TOPIC_CONFIG),
               ConfigEntry("y", None, ConfigSource.DEFAULT_CONFIG)]
    assert configs_for_new_topic(entries, ConfigPropertyFilter(use_defaults_from="source")) == {}
    assert config_sync_ops(entries, ConfigPropertyFilter()) == [ConfigOp("y", "delete", None)]


def test_empty_exclude_list_excludes_nothing() -> None:
    flt = ConfigPropertyFilter(())
    assert flt.should_replicate_config_property("min.insync.replicas")


def test_use_defaults_from_is_validated() -> None:
    with pytest.raises(ConfigError) as info:
        ConfigPropertyFilter(use_defaults_from="both")  # type: ignore[arg-type]
    assert info.value.key == "use.defaults.from"


# --- properties ------------------------------------------------------------------------------

_LITERAL = st.text(alphabet="abcXYZ019._-", min_size=1, max_size=10)


@given(names=st.lists(_LITERAL, min_size=1, max_size=4), probe=_LITERAL)
def test_escaped_literals_match_exactly_themselves(names: list[str], probe: str) -> None:
    pattern = compile_patterns([re.escape(n) for n in names], key="topics")
    assert pattern is not None
    assert (pattern.fullmatch(probe) is not None) == (probe in names)
