"""Topic, group and config-property filters with MM2's list and regex semantics (ConfigDef).

Operators reuse their MM2 properties files, so a filter must select exactly the names Java MM2
selects.  Three Java behaviours carry over on purpose:

* list values split on commas (a comma inside a regex such as ``a{1,3}`` splits it);
* the items are ``|``-joined *without* grouping and the whole name must match;
* an empty list matches nothing (Java compiles the empty pattern, which matches only the empty
  string, and no topic is named ``""``).

Patterns are Java regular expressions, translated by `mirrorline.core.javaregex` (which
rejects, rather than silently changes, what Python cannot match the same way).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Final, Literal, Protocol

from mirrorline.core.errors import ConfigError, quoted
from mirrorline.core.javaregex import (
    JavaPattern,
    JavaRegexIncompatible,
    PatternTooLarge,
    compile_java,
)
from mirrorline.core.policy import ReplicationPolicy, is_cycle

__all__ = [
    "DEFAULT_CONFIG_PROPERTIES_EXCLUDE",
    "DEFAULT_GROUPS",
    "DEFAULT_GROUPS_EXCLUDE",
    "DEFAULT_TOPICS",
    "DEFAULT_TOPICS_EXCLUDE",
    "ConfigEntry",
    "ConfigOp",
    "ConfigPropertyFilter",
    "ConfigSource",
    "GroupFilter",
    "NameFilter",
    "NamePredicate",
    "TopicFilter",
    "compile_patterns",
    "config_sync_ops",
    "configs_for_new_topic",
    "parse_list",
    "should_replicate_topic",
]

DEFAULT_TOPICS: Final = (".*",)
DEFAULT_TOPICS_EXCLUDE: Final = (r".*[\-\.]internal", r".*\.replica", r"__.*")
DEFAULT_GROUPS: Final = (".*",)
DEFAULT_GROUPS_EXCLUDE: Final = (r"console-consumer-.*", r"connect-.*", r"__.*")
DEFAULT_CONFIG_PROPERTIES_EXCLUDE: Final = (
    r"follower\.replication\.throttled\.replicas",
    r"leader\.replication\.throttled\.replicas",
    r"message\.timestamp\.difference\.max\.ms",
    r"message\.timestamp\.type",
    r"unclean\.leader\.election\.enable",
    r"min\.insync\.replicas",
)

# --------------------------------------------------------------------------------------------
# LIST values

#: Java's String.trim() strips every character <= U+0020, and only those.
_JAVA_TRIM: Final = "".join(chr(c) for c in range(0x21))
#: Java's \s is ASCII whitespace [ \t\n\x0B\f\r], narrower than Python's Unicode \s.
_JAVA_SPACE: Final = " \t\n\x0b\f\r"


def parse_list(value: str) -> tuple[str, ...]:
    """Split a LIST property the way Kafka's ConfigDef does.

    Trailing empty items are kept (``"a,"`` -> ``("a", "")``): Java splits with limit -1.
    """
    trimmed = value.strip(_JAVA_TRIM)
    if not trimmed:
        return ()
    # Java splits on `\s*,\s*`; done with str methods, which stay linear where a regex
    # split is quadratic on long runs of whitespace without a comma.
    # (The value's own ends are trimmed already, so stripping every item is the same.)
    return tuple(item.strip(_JAVA_SPACE) for item in trimmed.split(","))


def compile_patterns(patterns: Sequence[str], *, key: str) -> JavaPattern | None:
    """Compile a pattern list as MM2 does: ``|``-joined, for full-name matching.

    Returns None for an empty list, meaning "matches nothing".  Each item is checked on its
    own first, so an error names the offending item; items that only work once joined (e.g.
    ``(a`` and ``b)``, which Java accepts as ``(a|b)``) are rejected because they come from a
    list split in the middle of a regex.
    """
    if not patterns:
        return None
    for number, pattern in enumerate(patterns, 1):
        try:
            compile_java(pattern)
        except PatternTooLarge as e:
            # Named by its place and first characters: the whole of it would flood the
            # error, the log and the caller's screen.
            raise ConfigError(key, f"pattern {number} ({quoted(pattern, 40)}) cannot be used: "
                                   f"{e}") from None
        except JavaRegexIncompatible as e:
            raise ConfigError(key, f"pattern {quoted(pattern)} cannot be used: {e}") from None
        except re.error as e:
            raise ConfigError(key, f"pattern {quoted(pattern)} is not a valid regular expression: "
                                   f"{e.msg}") from None
    joined = "|".join(patterns)
    try:
        return compile_java(joined, bound_length=False)
    except (JavaRegexIncompatible, re.error) as e:
        raise ConfigError(key, f"patterns {quoted(', '.join(patterns))} do not combine into one "
                               f"regular expression {quoted(joined)}: {e}") from None


# --------------------------------------------------------------------------------------------
# Name filters


class NamePredicate(Protocol):
    """Anything that decides on a topic or group name."""

    def accepts(self, name: str) -> bool: ...


class NameFilter:
    """Include/exclude pattern lists evaluated independently; exclude wins."""

    def __init__(self, include: Sequence[str], exclude: Sequence[str], *,
                 include_key: str, exclude_key: str) -> None:
        self.include = tuple(include)
        self.exclude = tuple(exclude)
        self._include = compile_patterns(self.include, key=include_key)
        self._exclude = compile_patterns(self.exclude, key=exclude_key)

    def accepts(self, name: str) -> bool:
        if self._include is None or self._include.fullmatch(name) is None:
            return False
        return self._exclude is None or self._exclude.fullmatch(name) is None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(include={self.include!r}, exclude={self.exclude!r})"


class TopicFilter(NameFilter):
    """MM2's DefaultTopicFilter: `topics` / `topics.exclude`."""

    def __init__(self, include: Sequence[str] = DEFAULT_TOPICS,
                 exclude: Sequence[str] = DEFAULT_TOPICS_EXCLUDE) -> None:
        super().__init__(include, exclude, include_key="topics", exclude_key="topics.exclude")


class GroupFilter(NameFilter):
    """MM2's DefaultGroupFilter: `groups` / `groups.exclude`."""

    def __init__(self, include: Sequence[str] = DEFAULT_GROUPS,
                 exclude: Sequence[str] = DEFAULT_GROUPS_EXCLUDE) -> None:
        super().__init__(include, exclude, include_key="groups", exclude_key="groups.exclude")


def should_replicate_topic(topic: str, *, policy: ReplicationPolicy,
                           topic_filter: NamePredicate, target_alias: str,
                           heartbeats_replication_enabled: bool, canary_enabled: bool) -> bool:
    """Whether a source topic is copied by the flow to `target_alias` (MM2's
    MirrorSourceConnector.shouldReplicateTopic).

    Heartbeats bypass the topic filter (when enabled) so that topology discovery works even
    with a narrow `topics` list, and so do canary topics when the flow's canary is on
    (`canary.enabled`), so that the flow can be probed; a flow whose canary is off treats
    them like any other topic (MM2 has no canary, so nothing there requires otherwise).
    Internal topics and cycles are never replicated.
    """
    selected = topic_filter.accepts(topic) or (
        canary_enabled and policy.is_canary_topic(topic)) or (
        heartbeats_replication_enabled and policy.is_heartbeats_topic(topic))
    return (selected and not policy.is_internal_topic(topic)
            and not is_cycle(policy, topic, target_alias))


# --------------------------------------------------------------------------------------------
# Topic config sync


class ConfigSource(IntEnum):
    """Where a broker says a config value comes from (DescribeConfigs `config_source`)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


@dataclass(frozen=True)
class ConfigEntry:
    """One described topic config."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool = False
    sensitive: bool = False

    @property
    def is_default(self) -> bool:
        """Only the hard-coded default counts; dynamic broker defaults do not (MM2 quirk)."""
        return self.source is ConfigSource.DEFAULT_CONFIG


@dataclass(frozen=True)
class ConfigOp:
    """One incremental-alter-configs operation on a remote topic (value None for delete)."""

    name: str
    op: Literal["set", "delete"]
    value: str | None


class ConfigPropertyFilter:
    """MM2's DefaultConfigPropertyFilter: `config.properties.exclude` and `use.defaults.from`."""

    def __init__(self, exclude: Sequence[str] = DEFAULT_CONFIG_PROPERTIES_EXCLUDE,
                 use_defaults_from: Literal["source", "target"] = "target") -> None:
        if use_defaults_from not in ("source", "target"):
            raise ConfigError("use.defaults.from",
                              f"must be 'source' or 'target', not {use_defaults_from!r}")
        self.exclude = tuple(exclude)
        self.use_defaults_from = use_defaults_from
        self._exclude = compile_patterns(self.exclude, key="config.properties.exclude")

    def should_replicate_config_property(self, name: str) -> bool:
        return self._exclude is None or self._exclude.fullmatch(name) is None

    def should_replicate_source_default(self, name: str) -> bool:
        """Whether a source-side default is copied rather than left to the target's default."""
        return self.use_defaults_from == "source"


def _syncable(entries: Iterable[ConfigEntry], flt: ConfigPropertyFilter) -> Iterable[ConfigEntry]:
    """Filters shared by both modes: read-only, sensitive, static broker, excluded names."""
    for e in entries:
        if e.read_only or e.sensitive or e.source is ConfigSource.STATIC_BROKER_CONFIG:
            continue
        if flt.should_replicate_config_property(e.name):
            yield e


def configs_for_new_topic(entries: Iterable[ConfigEntry],
                          flt: ConfigPropertyFilter) -> dict[str, str]:
    """Configs for creating a remote topic (MM2's non-incremental mode).

    Default entries are copied only when defaults come from the source; values the broker
    reports as null are skipped (Java would fail building the config map on them).
    """
    configs: dict[str, str] = {}
    for e in _syncable(entries, flt):
        if e.is_default and not flt.should_replicate_source_default(e.name):
            continue
        if e.value is not None:
            configs[e.name] = e.value
    return configs


def config_sync_ops(entries: Iterable[ConfigEntry], flt: ConfigPropertyFilter) -> list[ConfigOp]:
    """Operations that make a remote topic's configs track its source topic (periodic sync).

    Every surviving property is forced: non-defaults (and defaults, with use.defaults.from =
    source) are SET to the source value; defaults otherwise are DELETEd so that the target
    falls back to its own default, wiping target-side overrides.  A SET with a null value is
    dropped: the broker would reject it and fail the whole topic's alteration.
    """
    ops: list[ConfigOp] = []
    for e in _syncable(entries, flt):
        if e.is_default and not flt.should_replicate_source_default(e.name):
            ops.append(ConfigOp(e.name, "delete", None))
        elif e.value is not None:
            ops.append(ConfigOp(e.name, "set", e.value))
    return ops
