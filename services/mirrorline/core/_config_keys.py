"""Which keys of an MM2 properties file Mirrorline knows, and what their defaults are.

Private helper of `mirrorline.core.config`. The keys themselves are declared once, in
`_config_decl.SETTINGS`; this module derives the sets and defaults the loader and the
unknown-key warnings work with, and holds what is not a setting (keys MM2 or Connect know
that do nothing here, client-key prefixes, secrets).

Three levels exist in an MM2 file and a key means something different at each:

* top level (`topics`, `security.protocol`, ...): defaults for every flow / every cluster;
* cluster level (`<alias>.bootstrap.servers`, `<alias>.consumer.*`, ...): connection and
  client settings of one cluster (plus Connect-worker settings of herders targeting it);
* flow level (`<src>-><tgt>.<key>`): overrides of connector properties for one flow.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from mirrorline.core._config_decl import SETTINGS, Kind
from mirrorline.core._config_values import is_secret as is_secret  # re-exported

#: MM2's own defaults, as strings exactly as its ConfigDefs declare them, for every connector
#: / worker property that has an effect in Mirrorline (declared in `_config_decl`).
MM2_DEFAULTS: Final[Mapping[str, str]] = MappingProxyType({
    s.name: s.mm2_default for s in SETTINGS
    if s.kind in (Kind.CONNECTOR, Kind.WORKER) and s.mm2_default is not None})

#: Where Mirrorline's default differs from MM2's: key -> (MM2 default, Mirrorline default,
#: why). Every other default is exactly MM2's.
MIRRORLINE_DEFAULT_OVERRIDES: Final[Mapping[str, tuple[str, str, str]]] = MappingProxyType({
    s.name: (s.mm2_default, s.default, s.why) for s in SETTINGS
    if s.mm2_default is not None and s.default is not None and s.default != s.mm2_default})

#: Keys of Mirrorline's heartbeat service (canary and audit), which MM2 lacks. They are
#: flow-level like MM2's connector keys, so one flow can have its own SLO or window.
HEARTBEAT_SERVICE_DEFAULTS: Final[Mapping[str, str]] = MappingProxyType({
    s.name: s.default for s in SETTINGS
    if s.kind is Kind.MIRRORLINE_FLOW and s.name.startswith(("canary.", "audit."))
    and s.default is not None})

#: Mirrorline's other flow-level keys (no MM2 equivalent), with their defaults. They resolve
#: like MM2's flow keys: `<source>-><target>.<key>`, then the top level, are validated like
#: every flow property and stored in flow definitions.
MIRRORLINE_FLOW_DEFAULTS: Final[Mapping[str, str]] = MappingProxyType({
    s.name: s.default for s in SETTINGS
    if s.kind is Kind.MIRRORLINE_FLOW and s.name not in HEARTBEAT_SERVICE_DEFAULTS
    and s.default is not None})

#: The defaults Mirrorline applies: MM2's, with the overrides above.
DEFAULTS: Final[Mapping[str, str]] = MappingProxyType({
    **MM2_DEFAULTS,
    **HEARTBEAT_SERVICE_DEFAULTS,
    **{key: ours for key, (_mm2, ours, _why) in MIRRORLINE_DEFAULT_OVERRIDES.items()},
    **MIRRORLINE_FLOW_DEFAULTS,
})

#: Mirrorline's own deployment-wide settings live under `mirrorline.`; an unknown
#: `mirrorline.*` key (a typo) is still reported. (`mirrorline.resume.tail.match` and the
#: `mirrorline.executor`/`mirrorline.spark.*` keys are flow keys.)
MIRRORLINE_KEYS: Final[frozenset[str]] = frozenset(
    s.name for s in SETTINGS if s.name.startswith("mirrorline.") and s.kind is Kind.TOP)

#: Connect-worker keys that Mirrorline honours; they resolve flow > target cluster > top level.
WORKER_KEYS: Final = frozenset(s.name for s in SETTINGS if s.kind is Kind.WORKER)

#: Flow-level (connector) keys with an effect: everything defaulted above except worker keys.
FLOW_KEYS: Final = ((frozenset(MM2_DEFAULTS) - WORKER_KEYS) | frozenset(MIRRORLINE_FLOW_DEFAULTS)
             | frozenset(HEARTBEAT_SERVICE_DEFAULTS))

#: MM2's deprecated filter keys (KIP-629) -> the key that replaced them. MM2 still reads them
#: when the new key is absent anywhere in the flow's properties; the new key wins otherwise.
DEPRECATED_ALIASES: Final[Mapping[str, str]] = MappingProxyType({
    s.name: s.replaced_by for s in SETTINGS if s.replaced_by is not None})

#: Keys people write believing MM2 has them; MM2's include lists were always `topics` and
#: `groups`, so MM2 drops these silently (and so does Mirrorline, with a warning).
NEVER_MM2_KEYS: Final[Mapping[str, str]] = MappingProxyType({
    "topics.whitelist": "topics",
    "groups.whitelist": "groups",
})

#: `source.cluster.alias` / `target.cluster.alias`: connector keys that MM2's dedicated mode
#: fills in only when absent, so a top-level or flow-level value changes the aliases used in
#: topic names.
NAMING_ALIAS_KEYS: Final = frozenset(s.name for s in SETTINGS if s.kind is Kind.NAMING)

#: Flow keys Mirrorline parses and checks but does not act on yet -> why (declared with
#: `Setting.not_acted_on`; warned about wherever they are written).
NOT_YET_ACTED_ON: Final[Mapping[str, str]] = MappingProxyType({
    s.name: s.not_acted_on for s in SETTINGS if s.not_acted_on is not None})

#: `config.providers` and `config.providers.<name>.*`: how secrets are resolved.
PROVIDER_PREFIX: Final = "config.providers"

CLIENT_PREFIXES: Final = ("consumer.", "producer.", "admin.")

#: MM2 properties that merely look like client overrides (`consumer.poll.timeout.ms` is *not*
#: the consumer's `poll.timeout.ms`); never copied into client configs from top or flow level.
NOT_CLIENT_KEYS: Final = frozenset({"consumer.poll.timeout.ms", "admin.timeout.ms",
                                    "admin.listeners"})

#: Keys MM2 / Kafka Connect know that do nothing in Mirrorline (exact names).
_NO_EFFECT_KEYS: Final = frozenset({
    "tasks.max", "tasks.max.enforce", "name", "connector.class", "forwarding.admin.class",
    "metric.reporters",
    "auto.include.jmx.reporter", "config.action.reload", "transaction.boundary",
    "transaction.boundary.interval.ms",
    "offsets.storage.topic", "group.id", "client.id", "offset.flush.timeout.ms",
    "dedicated.mode.enable.internal.rest", "listeners", "admin.listeners",
    "key.converter", "value.converter", "header.converter", "transforms", "predicates",
    "plugin.path", "plugin.discovery", "connector.client.config.override.policy",
    "scheduled.rebalance.max.delay.ms", "connect.protocol", "heartbeat.interval.ms",
    "session.timeout.ms", "rebalance.timeout.ms", "topic.creation.enable",
    "topic.creation.groups", "access.control.allow.origin", "access.control.allow.methods",
    "response.http.headers.config", "topic.tracking.enable", "topic.tracking.allow.reset",
})

#: Families of keys MM2 / Kafka Connect know that do nothing in Mirrorline (prefixes).
_NO_EFFECT_PREFIXES: Final = (
    "key.converter.", "value.converter.", "header.converter.", "transforms.", "predicates.",
    "errors.", "topic.creation.", "offset.storage.", "status.storage.", "config.storage.",
    "rest.", "listeners.", "admin.listeners.", "worker.", "task.",
    "tasks.", "metrics.", "inter.worker.",
)

NO_EFFECT = "accepted for MM2 compatibility; no effect in Mirrorline"


class Status(enum.Enum):
    """What Mirrorline makes of a key at one level of the file."""

    USED = "used"
    NO_EFFECT = "no effect"
    UNKNOWN = "unknown"


def is_connection_key(key: str) -> bool:
    """Keys every client of a cluster inherits (MirrorMakerConfig.clientConfig)."""
    return key in ("bootstrap.servers", "security.protocol") or key.startswith(("ssl.", "sasl."))


def is_client_key(key: str) -> bool:
    """`consumer.*` / `producer.*` / `admin.*` overrides (top or flow level)."""
    return key.startswith(CLIENT_PREFIXES) and key not in NOT_CLIENT_KEYS


def _is_no_effect(key: str) -> bool:
    return key in _NO_EFFECT_KEYS or key.startswith(_NO_EFFECT_PREFIXES)


def is_provider_key(key: str) -> bool:
    return key == PROVIDER_PREFIX or key.startswith(PROVIDER_PREFIX + ".")


#: MM2's exactly-once keys (KIP-618): read by the replicator, which refuses to run without
#: transactions when they require them (`mirrorline.core.exactly_once`).
EXACTLY_ONCE_KEYS: Final = frozenset(s.name for s in SETTINGS if s.kind is Kind.EXACTLY_ONCE)


def top_level_status(key: str) -> Status:
    """Classify a key written without any cluster or flow prefix."""
    if key in ("clusters", "use.defaults.from") or key in FLOW_KEYS or key in WORKER_KEYS:
        return Status.USED
    if key in EXACTLY_ONCE_KEYS:
        return Status.USED
    if key in DEPRECATED_ALIASES or key in NAMING_ALIAS_KEYS or is_provider_key(key):
        return Status.USED
    if is_connection_key(key) or is_client_key(key):
        return Status.USED
    if key.startswith("mirrorline."):
        return Status.USED if key in MIRRORLINE_KEYS else Status.UNKNOWN
    return Status.NO_EFFECT if _is_no_effect(key) else Status.UNKNOWN


def flow_level_status(rest: str) -> Status:
    """Classify the part after `<src>-><tgt>.`; connection keys do nothing there."""
    if is_connection_key(rest) or rest == "clusters" or is_provider_key(rest):
        return Status.NO_EFFECT
    return top_level_status(rest)


def cluster_level_status(rest: str) -> Status:
    """Classify the part after `<alias>.`: connection, client and worker keys only."""
    if is_connection_key(rest) or rest.startswith(CLIENT_PREFIXES) or rest in WORKER_KEYS:
        return Status.USED
    if rest == "exactly.once.source.support":
        return Status.USED
    if (rest in FLOW_KEYS or rest in DEPRECATED_ALIASES or rest == "clusters"
            or _is_no_effect(rest)):
        return Status.NO_EFFECT
    return Status.UNKNOWN


# --- what an unknown key is compared with ("did you mean ...", `mirrorline.core.typos`) -----

#: Whole keys with an effect at top level: every declared key may be written there.
TOP_LEVEL_KEYS: Final = frozenset(s.name for s in SETTINGS)
#: Whole keys with an effect after `<src>-><tgt>.`: the declared flow-level kinds.
FLOW_LEVEL_KEYS: Final = frozenset(s.name for s in SETTINGS if s.kind in (
    Kind.CONNECTOR, Kind.WORKER, Kind.MIRRORLINE_FLOW, Kind.NAMING, Kind.EXACTLY_ONCE,
    Kind.DEPRECATED))
#: Whole keys with an effect after `<alias>.`.
CLUSTER_LEVEL_KEYS: Final = (frozenset({"bootstrap.servers", "security.protocol",
                                        "exactly.once.source.support"}) | WORKER_KEYS)
#: Families of keys (any name after the prefix has an effect, or is checked by the clients).
CONNECTION_FAMILIES: Final = ("ssl.", "sasl.")
TOP_LEVEL_FAMILIES: Final = (*CONNECTION_FAMILIES, *CLIENT_PREFIXES, PROVIDER_PREFIX + ".")
CLUSTER_LEVEL_FAMILIES: Final = (*CONNECTION_FAMILIES, *CLIENT_PREFIXES)
