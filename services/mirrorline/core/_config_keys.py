"""Which keys of an MM2 properties file Mirrorline knows, and what their defaults are.

Private helper of `mirrorline.core.config`. Kept apart so the registry -- the facts the
README and the unknown-key warnings are built from -- reads as data, not buried in logic.

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

_MIRROR: Final = "org.apache.kafka.connect.mirror."

#: MM2's own defaults, as strings exactly as its ConfigDefs declare them (MirrorSourceConfig,
#: MirrorCheckpointConfig, MirrorHeartbeatConfig, MirrorMakerConfig), for every connector /
#: worker property that has an effect in Mirrorline.
MM2_DEFAULTS: Final[Mapping[str, str]] = MappingProxyType({
    "enabled": "false",  # dedicated mode's default for a generated flow (MirrorMakerConfig)
    "topics": ".*",
    "topics.exclude": r".*[\-\.]internal, .*\.replica, __.*",
    "groups": ".*",
    "groups.exclude": "console-consumer-.*, connect-.*, __.*",
    "config.properties.exclude": (
        r"follower\.replication\.throttled\.replicas, "
        r"leader\.replication\.throttled\.replicas, "
        r"message\.timestamp\.difference\.max\.ms, message\.timestamp\.type, "
        r"unclean\.leader\.election\.enable, min\.insync\.replicas"
    ),
    "use.defaults.from": "target",
    "topic.filter.class": _MIRROR + "DefaultTopicFilter",
    "group.filter.class": _MIRROR + "DefaultGroupFilter",
    "config.property.filter.class": _MIRROR + "DefaultConfigPropertyFilter",
    "replication.policy.class": _MIRROR + "DefaultReplicationPolicy",
    "replication.policy.separator": ".",
    "replication.policy.internal.topic.separator.enabled": "true",
    "replication.factor": "2",
    "refresh.topics.enabled": "true",
    "refresh.topics.interval.seconds": "600",
    "refresh.groups.enabled": "true",
    "refresh.groups.interval.seconds": "600",
    "sync.topic.configs.enabled": "true",
    "sync.topic.configs.interval.seconds": "600",
    "sync.topic.acls.enabled": "true",
    "sync.topic.acls.interval.seconds": "600",
    "emit.offset-syncs.enabled": "true",
    "offset-syncs.topic.location": "source",
    "offset-syncs.topic.replication.factor": "3",
    "offset.lag.max": "100",
    "heartbeats.replication.enabled": "true",
    "emit.heartbeats.enabled": "true",
    "emit.heartbeats.interval.seconds": "1",
    "heartbeats.topic.replication.factor": "3",
    "emit.checkpoints.enabled": "true",
    "emit.checkpoints.interval.seconds": "60",
    "checkpoints.topic.replication.factor": "3",
    "sync.group.offsets.enabled": "false",
    "sync.group.offsets.interval.seconds": "60",
    "consumer.poll.timeout.ms": "1000",
    "admin.timeout.ms": "60000",
    # Connect-worker properties MM2's behaviour depends on (MirrorMakerConfig).
    "offset.storage.replication.factor": "3",
    "offset.flush.interval.ms": "60000",
})

_BROKER_DEFAULT_RF = ("MM2's default fails on clusters with fewer brokers; -1 asks the "
                      "broker for its default.replication.factor")

#: Where Mirrorline's default differs from MM2's: key -> (MM2 default, Mirrorline default,
#: why). Every other default is exactly MM2's. The README is generated/checked from this.
MIRRORLINE_DEFAULT_OVERRIDES: Final[dict[str, tuple[str, str, str]]] = {
    "replication.factor": ("2", "-1", "MM2's default fails on single-broker clusters; -1 "
                           "asks the broker for its default.replication.factor"),
    "offset-syncs.topic.replication.factor": ("3", "-1", _BROKER_DEFAULT_RF),
    "checkpoints.topic.replication.factor": ("3", "-1", _BROKER_DEFAULT_RF),
    "heartbeats.topic.replication.factor": ("3", "-1", _BROKER_DEFAULT_RF),
    "offset.storage.replication.factor": ("3", "-1", _BROKER_DEFAULT_RF),
    "refresh.topics.interval.seconds": ("600", "30", "new topics start replicating within "
                                        "seconds instead of up to ten minutes later"),
    "refresh.groups.interval.seconds": ("600", "30", "new consumer groups get checkpoints "
                                        "within seconds instead of up to ten minutes later"),
    "emit.checkpoints.interval.seconds": ("60", "5", "translated group offsets lag at most "
                                          "a few seconds behind, so a failover replays less"),
    "offset.flush.interval.ms": ("60000", "5000", "offset syncs and progress are flushed "
                                 "often, so a restart or failover replays less"),
    "sync.topic.configs.interval.seconds": ("600", "60", "a config changed on either side "
                                            "shows up as drift (and is reverted) within a "
                                            "minute; one round costs two DescribeConfigs"),
    "sync.topic.acls.interval.seconds": ("600", "60", "ACL changes reach the target within a "
                                         "minute; one round costs two DescribeAcls"),
}

#: Keys of Mirrorline's heartbeat service (canary and audit), which MM2 lacks. They are
#: flow-level like MM2's connector keys, so one flow can have its own SLO or window.
HEARTBEAT_SERVICE_DEFAULTS: Final[Mapping[str, str]] = MappingProxyType({
    "canary.enabled": "true",
    "canary.interval.ms": "1000",
    "canary.latency.slo.ms": "5000",
    "audit.enabled": "true",
    "audit.window.ms": "60000",
    "audit.grace.ms": "10000",
    "audit.missing.after.ms": "300000",
})

#: Mirrorline's own flow-level keys (no MM2 equivalent), with their defaults. They resolve
#: like MM2's flow keys: `<source>-><target>.<key>`, then the top level, are validated like
#: every flow property and stored in flow definitions.
MIRRORLINE_FLOW_DEFAULTS: Final[Mapping[str, str]] = MappingProxyType({
    # apply: the config-sync service changes the target; plan: it only reports drift.
    "sync.mode": "apply",
    # mm2: MM2's ACL rules; full: also prefixed and group ACLs, and removal of ACLs it made.
    "sync.topic.acls.mode": "mm2",
    # Where a flow's partitions run (replicator workers or the Spark executor) and when
    # `auto` offloads a partition to Spark.
    "mirrorline.executor": "auto",
    "mirrorline.spark.offload.bytes.per.second": "10485760",
    "mirrorline.spark.offload.sustain.seconds": "60",
    "mirrorline.spark.offload.lag.records": "1000000",
    "mirrorline.spark.reclaim.lag.records": "10000",
})

#: The defaults Mirrorline applies: MM2's, with the overrides above.
DEFAULTS: Final[Mapping[str, str]] = MappingProxyType({
    **MM2_DEFAULTS,
    **HEARTBEAT_SERVICE_DEFAULTS,
    **{key: ours for key, (_mm2, ours, _why) in MIRRORLINE_DEFAULT_OVERRIDES.items()},
    **MIRRORLINE_FLOW_DEFAULTS,
})

#: Mirrorline's own settings live under `mirrorline.`; an unknown `mirrorline.*` key (a typo)
#: is still reported. `mirrorline.deployment` names the deployment, so that several can share
#: a home cluster: it prefixes the control-plane topics.
#: `mirrorline.resume.tail.match = false` turns off resuming partitions from the target's tail
#: (they then resume from durable progress alone, at-least-once as MM2).
MIRRORLINE_KEYS: Final[frozenset[str]] = frozenset({
    "mirrorline.deployment",
    "mirrorline.resume.tail.match",
    # gRPC transport security and authentication (see mirrorline.core.security).
    "mirrorline.grpc.tls.certificate", "mirrorline.grpc.tls.key", "mirrorline.grpc.tls.ca",
    "mirrorline.grpc.tls.client.auth.required", "mirrorline.grpc.tls.server.name",
    "mirrorline.grpc.insecure", "mirrorline.admin.tokens.file",
    "mirrorline.grpc.service.token.file",
})

#: Connect-worker keys that Mirrorline honours; they resolve flow > target cluster > top level.
WORKER_KEYS: Final = frozenset({"offset.storage.replication.factor", "offset.flush.interval.ms"})

#: Flow-level (connector) keys with an effect: everything defaulted above except worker keys.
FLOW_KEYS: Final = ((frozenset(MM2_DEFAULTS) - WORKER_KEYS) | frozenset(MIRRORLINE_FLOW_DEFAULTS)
             | frozenset(HEARTBEAT_SERVICE_DEFAULTS))

#: MM2's deprecated filter keys (KIP-629) -> the key that replaced them. MM2 still reads them
#: when the new key is absent anywhere in the flow's properties; the new key wins otherwise.
DEPRECATED_ALIASES: Final[Mapping[str, str]] = MappingProxyType({
    "topics.blacklist": "topics.exclude",
    "groups.blacklist": "groups.exclude",
    "config.properties.blacklist": "config.properties.exclude",
})

#: Keys people write believing MM2 has them; MM2's include lists were always `topics` and
#: `groups`, so MM2 drops these silently (and so does Mirrorline, with a warning).
NEVER_MM2_KEYS: Final[Mapping[str, str]] = MappingProxyType({
    "topics.whitelist": "topics",
    "groups.whitelist": "groups",
})

#: `source.cluster.alias` / `target.cluster.alias`: connector keys that MM2's dedicated mode
#: fills in only when absent, so a top-level or flow-level value changes the aliases used in
#: topic names.
NAMING_ALIAS_KEYS: Final = frozenset({"source.cluster.alias", "target.cluster.alias"})

#: Flow keys Mirrorline parses and checks but does not act on yet (it does not emit
#: heartbeats, nor sync topic configs or ACLs periodically).
NOT_YET_ACTED_ON: Final[Mapping[str, str]] = MappingProxyType({
    "sync.topic.configs.enabled": "topic configs are copied when a remote topic is created, "
                                  "not kept in sync",
    "sync.topic.configs.interval.seconds": "topic configs are copied when a remote topic is "
                                           "created, not kept in sync",
    "sync.topic.acls.enabled": "ACLs are not synced by the replicator",
    "sync.topic.acls.interval.seconds": "ACLs are not synced by the replicator",
    "emit.heartbeats.enabled": "Mirrorline emits no heartbeats yet (it only decides, as in "
                               "MM2, which flows a top-level enabled=true switches on)",
    "emit.heartbeats.interval.seconds": "Mirrorline emits no heartbeats yet",
    "heartbeats.topic.replication.factor": "Mirrorline emits no heartbeats yet",
})

#: `config.providers` and `config.providers.<name>.*`: how secrets are resolved.
PROVIDER_PREFIX: Final = "config.providers"

CLIENT_PREFIXES: Final = ("consumer.", "producer.", "admin.")

#: MM2 properties that merely look like client overrides (`consumer.poll.timeout.ms` is *not*
#: the consumer's `poll.timeout.ms`); never copied into client configs from top or flow level.
NOT_CLIENT_KEYS: Final = frozenset({"consumer.poll.timeout.ms", "admin.timeout.ms",
                                    "admin.listeners"})

#: Java class names accepted for the filter plug-ins (Mirrorline runs only the default filters).
FILTER_CLASSES: Final[Mapping[str, frozenset[str]]] = MappingProxyType({
    key: frozenset({MM2_DEFAULTS[key], MM2_DEFAULTS[key].removeprefix(_MIRROR)})
    for key in ("topic.filter.class", "group.filter.class", "config.property.filter.class")
})

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


def is_secret(key: str) -> bool:
    """Keys whose values must never be shown (Kafka's PASSWORD-typed configs and friends)."""
    lowered = key.lower()
    return ("password" in lowered or "secret" in lowered
            or lowered.endswith(("sasl.jaas.config", "ssl.keystore.key")))


def _is_no_effect(key: str) -> bool:
    return key in _NO_EFFECT_KEYS or key.startswith(_NO_EFFECT_PREFIXES)


def is_provider_key(key: str) -> bool:
    return key == PROVIDER_PREFIX or key.startswith(PROVIDER_PREFIX + ".")


#: MM2's exactly-once keys (KIP-618): read by the replicator, which refuses to run without
#: transactions when they require them (`mirrorline.core.exactly_once`).
EXACTLY_ONCE_KEYS: Final = frozenset({"exactly.once.support", "exactly.once.source.support"})


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

#: Whole keys with an effect at top level.
TOP_LEVEL_KEYS: Final = (frozenset({"clusters", "use.defaults.from", "bootstrap.servers",
                                    "security.protocol", PROVIDER_PREFIX})
                         | FLOW_KEYS | WORKER_KEYS | EXACTLY_ONCE_KEYS
                         | frozenset(DEPRECATED_ALIASES) | NAMING_ALIAS_KEYS | MIRRORLINE_KEYS)
#: Whole keys with an effect after `<src>-><tgt>.`.
FLOW_LEVEL_KEYS: Final = (FLOW_KEYS | WORKER_KEYS | EXACTLY_ONCE_KEYS
                          | frozenset(DEPRECATED_ALIASES) | NAMING_ALIAS_KEYS)
#: Whole keys with an effect after `<alias>.`.
CLUSTER_LEVEL_KEYS: Final = (frozenset({"bootstrap.servers", "security.protocol",
                                        "exactly.once.source.support"}) | WORKER_KEYS)
#: Families of keys (any name after the prefix has an effect, or is checked by the clients).
CONNECTION_FAMILIES: Final = ("ssl.", "sasl.")
TOP_LEVEL_FAMILIES: Final = (*CONNECTION_FAMILIES, *CLIENT_PREFIXES, PROVIDER_PREFIX + ".")
CLUSTER_LEVEL_FAMILIES: Final = (*CONNECTION_FAMILIES, *CLIENT_PREFIXES)
