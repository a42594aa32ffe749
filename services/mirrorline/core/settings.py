"""The resolved configuration every service works from.

`mirrorline.core.config` turns an MM2 properties file into these objects; nothing
else parses configuration. Client settings stay in Kafka's Java property names here
(`max.partition.fetch.bytes`, `sasl.jaas.config`, ...) so that what operators wrote is
what they see in errors; `mirrorline.kafka.clients` translates them for aiokafka.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Literal

from mirrorline.core._config_providers import NO_LOOKUPS, ProviderLookups
from mirrorline.core.offload import OffloadSettings
from mirrorline.core.topics import offset_map_topic

if TYPE_CHECKING:
    from mirrorline.core.policy import ReplicationPolicy

OffsetSyncsLocation = Literal["source", "target"]


@dataclass(frozen=True)
class PolicySettings:
    """Which replication policy a flow uses and how it is configured."""

    kind: Literal["default", "identity"] = "default"
    #: The separator, or None when `replication.policy.separator` was not given
    #: (MM2 only applies a separator -- and the internal-separator flag -- when the key is present).
    separator: str | None = None
    internal_topic_separator_enabled: bool = True


@dataclass(frozen=True)
class ClusterSettings:
    alias: str
    bootstrap_servers: str
    #: Connection keys (`bootstrap.servers`, `security.protocol`, `ssl.*`, `sasl.*`) for this
    #: cluster: top-level values overlaid by `<alias>.` values.
    connection: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ClientSettings:
    """Client configs (Java names) for one flow, resolved as MirrorMakerConfig layers them."""

    source_consumer: Mapping[str, str]
    source_producer: Mapping[str, str]
    source_admin: Mapping[str, str]
    target_consumer: Mapping[str, str]
    target_producer: Mapping[str, str]
    target_admin: Mapping[str, str]


@dataclass(frozen=True)
class CanarySettings:
    """`canary.*`: probe records sent through a flow to measure its end-to-end latency."""

    enabled: bool = True
    interval_ms: int = 1000
    latency_slo_ms: int = 5000


@dataclass(frozen=True)
class AuditSettings:
    """`audit.*`: per-window counts and checksums compared between source and target."""

    enabled: bool = True
    window_ms: int = 60000
    grace_ms: int = 10000
    #: How long a window short of records on the target waits for them, while nothing
    #: later reached the target partition, before it is judged MISSING.
    missing_after_ms: int = 300000


@dataclass(frozen=True)
class FlowSettings:
    """Everything one replication flow `source->target` needs, defaults applied."""

    source: str
    target: str
    enabled: bool
    topics: tuple[str, ...]
    topics_exclude: tuple[str, ...]
    groups: tuple[str, ...]
    groups_exclude: tuple[str, ...]
    config_properties_exclude: tuple[str, ...]
    use_defaults_from: Literal["source", "target"]
    policy: PolicySettings
    replication_factor: int
    refresh_topics_enabled: bool
    refresh_topics_interval_s: float
    refresh_groups_enabled: bool
    refresh_groups_interval_s: float
    sync_topic_configs_enabled: bool
    sync_topic_configs_interval_s: float
    sync_topic_acls_enabled: bool
    sync_topic_acls_interval_s: float
    emit_offset_syncs_enabled: bool
    offset_syncs_topic_location: OffsetSyncsLocation
    offset_syncs_topic_replication_factor: int
    offset_lag_max: int
    heartbeats_replication_enabled: bool
    emit_heartbeats_enabled: bool
    emit_heartbeats_interval_s: float
    heartbeats_topic_replication_factor: int
    emit_checkpoints_enabled: bool
    emit_checkpoints_interval_s: float
    checkpoints_topic_replication_factor: int
    sync_group_offsets_enabled: bool
    sync_group_offsets_interval_s: float
    consumer_poll_timeout_ms: int
    #: Replication factor of the progress topic `mm2-offsets.<source>.internal` on the target
    #: (MM2's `offset.storage.replication.factor`).
    offset_storage_replication_factor: int
    #: How often delayed offset syncs are flushed even while records keep flowing
    #: (MM2's `offset.flush.interval.ms`).
    offset_flush_interval_ms: int
    clients: ClientSettings
    #: Every effective property of this flow (top-level overlaid by `source->target.`),
    #: for components that want the raw view (e.g. error messages).
    properties: Mapping[str, str] = field(default_factory=dict)
    #: `sync.mode`: "apply" lets the config-sync service change the target, "plan" only
    #: reports drift until an operator applies it.
    sync_mode: Literal["apply", "plan"] = "apply"
    #: `sync.topic.acls.mode`: "mm2" (MM2's rules) or "full" (see docs/config-sync.md).
    sync_topic_acls_mode: Literal["mm2", "full"] = "mm2"
    #: Upper bound for each admin-client call (MM2's `admin.timeout.ms`, default 60000).
    admin_timeout_ms: int = 60000
    #: Where the flow's partitions run (`mirrorline.executor`, `mirrorline.spark.*`).
    offload: OffloadSettings = field(default_factory=OffloadSettings)
    #: MM2's `source.cluster.alias` / `target.cluster.alias` when the file sets them (top level
    #: or per flow): the aliases that go into topic names (remote topics, checkpoints and
    #: offset-syncs topics, cycle detection). None: the flow's own cluster alias, as in MM2.
    source_cluster_alias: str | None = None
    target_cluster_alias: str | None = None
    #: The heartbeat service's canary and audit (Mirrorline keys, no MM2 equivalent).
    canary: CanarySettings = field(default_factory=CanarySettings)
    audit: AuditSettings = field(default_factory=AuditSettings)
    #: `mirrorline.resume.tail.match`: a resuming owner matches the target's tail against the
    #: source (False: durable progress alone, at-least-once as MM2).
    resume_tail_match: bool = True
    #: `mirrorline.batch.path`: "on" copies the source's record batches as they are where
    #: the target takes them, "auto" too unless a partition's batches are small, "off"
    #: decodes and re-batches every record (docs/batch-path.md).
    batch_path: Literal["auto", "on", "off"] = "auto"

    # -- facts derived from the settings, computed here and nowhere else ------------------
    # (as MM2's MirrorSourceConfig.offsetSyncsTopic() and MirrorCheckpointConfig do): every
    # service, the Spark executor and the client library ask these instead of recomputing.

    @property
    def name(self) -> str:
        return f"{self.source}->{self.target}"

    @cached_property
    def replication_policy(self) -> ReplicationPolicy:
        """The flow's replication policy; an identity policy knows the naming source alias
        (MM2 hands `source.cluster.alias` to the policy)."""
        from mirrorline.core.policy import make_policy  # policy imports this module
        return make_policy(self.policy, self.naming_source)

    def remote_topic(self, topic: str) -> str:
        """The name `topic` of the source gets on the target."""
        return self.replication_policy.format_remote_topic(self.naming_source, topic)

    @property
    def offset_syncs_at_source(self) -> bool:
        """Whether the offset-syncs topic lives on the source (`offset-syncs.topic.location`)."""
        return self.offset_syncs_topic_location == "source"

    @property
    def offset_syncs_cluster(self) -> str:
        """The alias (in `clusters`) of the cluster that holds the offset-syncs topic."""
        return self.source if self.offset_syncs_at_source else self.target

    @property
    def offset_syncs_topic(self) -> str:
        """MM2's `MirrorSourceConfig.offsetSyncsTopic()`: named after the *other* cluster,
        in its naming alias (`target.cluster.alias` / `source.cluster.alias`)."""
        return self.replication_policy.offset_syncs_topic(
            self.naming_target if self.offset_syncs_at_source else self.naming_source)

    @property
    def checkpoints_topic(self) -> str:
        """MM2's `MirrorCheckpointConfig.checkpointsTopic()`, on the target."""
        return self.replication_policy.checkpoints_topic(self.naming_source)

    @property
    def heartbeats_topic(self) -> str:
        """The heartbeats topic a heartbeat emitter writes on the target."""
        return self.replication_policy.heartbeats_topic()

    @property
    def canary_topic(self) -> str:
        """The canary topic the heartbeat service writes on the source."""
        return self.replication_policy.canary_topic()

    @property
    def offset_map_topic(self) -> str:
        """Mirrorline's dense offset map on the target (real source alias)."""
        return offset_map_topic(self.source)

    @property
    def auto_offset_reset(self) -> str:
        """The source consumer's `auto.offset.reset`: where a partition without any known
        position starts (`earliest`, `latest` or `none`)."""
        return self.clients.source_consumer.get("auto.offset.reset", "earliest")

    @property
    def deployment(self) -> str | None:
        """`mirrorline.deployment`, as the flow's properties carry it."""
        return self.properties.get("mirrorline.deployment")

    @property
    def naming_source(self) -> str:
        """The source alias as it appears in topic names (`source.cluster.alias`)."""
        return self.source if self.source_cluster_alias is None else self.source_cluster_alias

    @property
    def naming_target(self) -> str:
        """The target alias as it appears in topic names (`target.cluster.alias`)."""
        return self.target if self.target_cluster_alias is None else self.target_cluster_alias


@dataclass(frozen=True)
class ConfigWarning:
    """Something the operator should know that does not stop the start (e.g. an unknown key)."""

    key: str
    message: str
    line: int | None = None
    #: The known keys an unknown key is nearly equal to (a likely typo; "did you mean ...").
    suggestions: tuple[str, ...] = ()

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line is not None else ""
        return f"{where}{self.key}: {self.message}"


@dataclass(frozen=True)
class MirrorSettings:
    """A whole deployment: clusters and flows (enabled or not), as the file describes it."""

    source_path: str | None
    clusters: Mapping[str, ClusterSettings]
    #: Every ordered pair mentioned or implied by the file, keyed by "a->b".
    flows: Mapping[str, FlowSettings]
    warnings: tuple[ConfigWarning, ...] = ()
    #: The raw properties exactly as read (after continuation/escape handling).
    raw: Mapping[str, str] = field(default_factory=dict)
    #: `mirrorline.deployment`: names this deployment's control-plane topics (None: default).
    deployment: str | None = None
    #: Every value a config provider resolved: secrets, hidden wherever a value is shown.
    secret_values: frozenset[str] = field(default=frozenset(), repr=False)
    #: The line each key of `raw` was (last) set on, for messages found after loading.
    lines: Mapping[str, int] = field(default_factory=dict, repr=False)
    #: What the config providers could read when the file was loaded; flows composed later
    #: (`mirrorline.core.flowdefs`) resolve the file's own references with it again.
    lookups: ProviderLookups = field(default=NO_LOOKUPS, repr=False, compare=False)

    def enabled_flows(self, targets: tuple[str, ...] | None = None) -> list[FlowSettings]:
        """Enabled flows, optionally only those whose target is in `targets` (like `--clusters`)."""
        return [
            f for f in self.flows.values()
            if f.enabled and (not targets or f.target in targets)
        ]
