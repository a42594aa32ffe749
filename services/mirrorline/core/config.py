"""THE configuration loader: an MM2 dedicated-mode properties file -> `MirrorSettings`.

Nothing else in Mirrorline reads configuration. Operators bring the file they already run
`connect-mirror-maker.sh` with, so keys, levels (top level, `<alias>.`, `<src>-><tgt>.`) and
defaults are MM2's -- except where MM2's default is a known trap on small clusters
(`MIRRORLINE_DEFAULT_OVERRIDES`) and where MM2's silence hides mistakes
(`DIFFERENCES_FROM_MM2`). Everything is checked here, before anything starts: a bad value is
a `ConfigError` naming the key and the line, a key without effect is a `ConfigWarning`.
Messages never contain secret values; use `redact` to print a configuration.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final, Literal, TypeVar

from mirrorline.core import _config_keys as keys
from mirrorline.core import _config_values as values
from mirrorline.core._config_keys import (
    DEFAULTS,
    MIRRORLINE_DEFAULT_OVERRIDES,
    MIRRORLINE_KEYS,
    MM2_DEFAULTS,
)
from mirrorline.core._config_layers import Layers, split_levels, unknown_key_warnings
from mirrorline.core.errors import ConfigError
from mirrorline.core.filters import compile_patterns, parse_list
from mirrorline.core.properties import Property, duplicates, last_wins, parse_properties
from mirrorline.core.settings import (
    AuditSettings,
    CanarySettings,
    ClientSettings,
    ClusterSettings,
    ConfigWarning,
    FlowSettings,
    MirrorSettings,
    PolicySettings,
)

__all__ = [
    "DEFAULTS",
    "DIFFERENCES_FROM_MM2",
    "MIRRORLINE_DEFAULT_OVERRIDES",
    "MIRRORLINE_KEYS",
    "MM2_DEFAULTS",
    "load_config",
    "parse_config",
    "redact",
]

#: Deliberate differences from MM2's dedicated mode, one sentence each (reused by the README).
DIFFERENCES_FROM_MM2: Final[tuple[str, ...]] = (
    "Top-level consumer.*, producer.* and admin.* client overrides apply to the clients of "
    "every flow; MM2 drops them silently and only honours <alias>.consumer.* and "
    "<source>-><target>.consumer.* (and the producer./admin. equivalents).",
    "A flow-level client override of a connection key (e.g. "
    "<source>-><target>.consumer.ssl.truststore.location) wins over the cluster's connection "
    "settings; in MM2 the cluster's connection settings win.",
    "A top-level use.defaults.from applies to every flow; MM2 drops it and only honours "
    "<source>-><target>.use.defaults.from.",
    "offset.storage.replication.factor and offset.flush.interval.ms resolve flow, then target "
    "cluster, then top level; MM2 reads them only from the Connect worker config, where a "
    "top-level offset.flush.interval.ms is ignored and a top-level offset.storage.* wins over "
    "the cluster-level one.",
    "Unknown keys, keys without effect and duplicate keys are reported as warnings; MM2 "
    "ignores them silently.",
    "Invalid values that MM2 only detects late or never are rejected at start-up: negative "
    "intervals or offset.lag.max, booleans other than true/false (also for "
    "<source>-><target>.enabled, which MM2 reads as false), cluster aliases that are not "
    "valid in topic names or contain the replication separator, flow keys that name clusters "
    "missing from clusters, and emit.offset-syncs.enabled=false together with an "
    "offset-syncs.* key (MM2 then silently runs no source connector).",
    "security.protocol is checked wherever it appears (top level, cluster, client "
    "overrides), not only when a client is created.",
    "Config providers (${provider:path:key}) are not supported and are rejected; MM2 "
    "resolves them in worker and client configs.",
    "Only the built-in replication policies and topic/group/config-property filters exist; "
    "any other replication.policy.class or *.filter.class is rejected (MM2 would load the "
    "Java class).",
    "The file is read as UTF-8 (a byte-order mark is skipped; ISO-8859-1 is used only when "
    "the bytes are not valid UTF-8); MM2 always reads ISO-8859-1.",
    "Trust and key stores must be PEM (ssl.truststore.type / ssl.keystore.type = PEM, or "
    "inline ssl.truststore.certificates / ssl.keystore.certificate.chain + "
    "ssl.keystore.key); JKS and PKCS12 stores are rejected with a conversion hint.",
    "SASL/OAUTHBEARER is not supported; PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and GSSAPI are.",
)

_JAVA_TRIM: Final = "".join(chr(c) for c in range(0x21))  # what Java's String.trim() strips
_PATTERN_KEYS: Final = ("topics", "topics.exclude", "groups", "groups.exclude",
                        "config.properties.exclude")
_OFFSET_SYNCS_KEYS: Final = ("offset-syncs.", "offset-syncs-")
_T = TypeVar("_T")


def redact(key: str, value: str) -> str:
    """`value`, or `[hidden]` (Kafka's own marker) when `key` holds a secret."""
    return "[hidden]" if keys.is_secret(key) else value


class _Redacted(dict[str, str]):
    """A plain dict whose repr hides secret values: logging a settings object leaks nothing."""

    def __repr__(self) -> str:
        return repr({key: redact(key, value) for key, value in self.items()})


def load_config(path: str | os.PathLike[str]) -> MirrorSettings:
    """Read and resolve the MM2 properties file at `path`."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as handle:
            data = handle.read()
    except OSError as e:
        raise ConfigError(None, f"cannot read the configuration file: {e.strerror or e}",
                          source=name) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("iso-8859-1")
    return parse_config(text, source=name)


def parse_config(text: str, *, source: str | None = None) -> MirrorSettings:
    """Resolve MM2 properties text; `source` names the file in messages."""
    return _Loader(parse_properties(text, source=source), source).load()


class _Loader:
    """One run of the loader over one file; holds what every step needs."""

    def __init__(self, entries: list[Property], source: str | None) -> None:
        self.source = source
        self.raw = last_wins(entries)
        self.entries = [Property(p.key, p.value.strip(_JAVA_TRIM), p.line)
                        for p in self.raw.values()]
        self.warnings: list[ConfigWarning] = [
            ConfigWarning(later.key, f"set more than once (lines {earlier.line} and "
                                     f"{later.line}); the last value wins", later.line)
            for earlier, later in duplicates(entries)
        ]

    def error(self, entry: Property | None, key: str, message: str) -> ConfigError:
        line = entry.line if entry is not None else None
        return ConfigError(entry.key if entry is not None else key, message, line=line,
                           source=self.source)

    def read(self, entry: Property, reader: Callable[[str], _T]) -> _T:
        try:
            return reader(entry.value)
        except values.BadValue as e:
            shown = values.shown(entry.key, entry.value)
            raise self.error(entry, entry.key, f"invalid value {shown}: {e}") from None

    def load(self) -> MirrorSettings:
        for entry in self.entries:
            if values.has_provider_reference(entry.value):
                raise self.error(entry, entry.key, "config providers (${provider:...}) are "
                                 "not supported; write the value into the file")
        aliases, clusters_entry = self._aliases()
        layers = split_levels(self.entries, aliases, self.source)
        self._validate(layers)
        self.warnings += unknown_key_warnings(self.entries, layers, aliases)
        everywhere = layers.top.get("enabled")
        if everywhere is not None and self.read(everywhere, values.parse_bool):
            self.warnings.append(ConfigWarning("enabled", (
                "a top-level enabled=true enables every cluster pair whose heartbeats are on "
                "(as in MM2); prefer <source>-><target>.enabled = true"), everywhere.line))
        clusters = {alias: self._cluster(alias, layers, clusters_entry) for alias in aliases}
        flows: dict[str, FlowSettings] = {}
        for source_alias in aliases:
            for target_alias in aliases:
                if source_alias != target_alias:
                    flow = _FlowBuilder(self, layers, source_alias, target_alias).build()
                    self._check_aliases((flow.source, flow.target), flow.policy.separator,
                                        clusters_entry)
                    flows[flow.name] = flow
        if not flows:  # a single cluster: check against the top-level separator
            separator = layers.top.get("replication.policy.separator")
            self._check_aliases(aliases, None if separator is None else separator.value,
                                clusters_entry)
        return MirrorSettings(source_path=self.source, clusters=clusters, flows=flows,
                              warnings=tuple(self.warnings),
                              raw=_Redacted({k: e.value for k, e in self.raw.items()}),
                              deployment=self._deployment(layers))

    def _deployment(self, layers: Layers) -> str | None:
        entry = layers.top.get("mirrorline.deployment")
        if entry is None or not entry.value:
            return None
        problem = values.alias_problem(entry.value)
        if problem is not None:
            raise self.error(entry, entry.key, problem.replace("alias", "deployment name"))
        return entry.value

    def _aliases(self) -> tuple[tuple[str, ...], Property]:
        entry = next((e for e in self.entries if e.key == "clusters"), None)
        if entry is None:
            raise self.error(None, "clusters", "missing: list the cluster aliases, e.g. "
                             "clusters = primary, backup")
        listed = parse_list(entry.value)
        if not listed:
            raise self.error(entry, "clusters", "is empty: list the cluster aliases, e.g. "
                             "clusters = primary, backup")
        unique = tuple(dict.fromkeys(listed))
        if len(unique) != len(listed):
            self.warnings.append(ConfigWarning("clusters", "lists an alias more than once",
                                               entry.line))
        for alias in unique:
            problem = values.alias_problem(alias)
            if problem is not None:
                raise self.error(entry, "clusters", problem)
        return unique, entry

    def _validate(self, layers: Layers) -> None:
        """Check the type of every value that has one, wherever it is written."""
        for store in (layers.top, *layers.flows.values()):
            for rest, entry in store.items():
                reader = values.reader_for(rest)
                if reader is not None:
                    self.read(entry, reader)
                if rest in _PATTERN_KEYS:
                    self.patterns(entry)
        for cluster_store in layers.clusters.values():
            for rest, entry in cluster_store.items():
                relevant = (keys.is_connection_key(rest) or rest in keys.WORKER_KEYS
                            or rest.startswith(keys.CLIENT_PREFIXES))
                reader = values.reader_for(rest)
                if relevant and reader is not None:
                    self.read(entry, reader)

    def patterns(self, entry: Property) -> tuple[str, ...]:
        items = parse_list(entry.value)
        try:
            compile_patterns(items, key=entry.key)
        except ConfigError as e:
            raise self.error(entry, entry.key, e.message) from None
        return items

    def _cluster(self, alias: str, layers: Layers, clusters_entry: Property) -> ClusterSettings:
        connection = cluster_connection(layers, alias)
        own = layers.cluster(alias).get("bootstrap.servers")
        bootstrap = connection.get("bootstrap.servers", "")
        if not bootstrap:
            # Without its own key, point at the `clusters` line that names the cluster.
            raise ConfigError(f"{alias}.bootstrap.servers", (
                f"cluster {alias!r} has no bootstrap servers; set {alias}.bootstrap.servers = "
                "host:port[, host:port...]"), line=(own or clusters_entry).line,
                source=self.source)
        if own is None:
            self.warnings.append(ConfigWarning(
                f"{alias}.bootstrap.servers", f"not set; cluster {alias!r} uses the top-level "
                "bootstrap.servers (the same brokers as every other cluster without its own)",
                layers.top["bootstrap.servers"].line))
        return ClusterSettings(alias, bootstrap, _Redacted(connection))

    def _check_aliases(self, aliases: tuple[str, ...], separator: str | None,
                       clusters_entry: Property) -> None:
        """Aliases must not contain the separator: `us.west.orders` reads back as from `us`."""
        separator = separator or "."
        for alias in aliases:
            if separator in alias:
                origin = alias.split(separator, 1)[0]
                raise self.error(clusters_entry, "clusters", (
                    f"cluster alias {alias!r} contains the replication policy separator "
                    f"{separator!r} (replication.policy.separator); a remote topic "
                    f"{alias + separator}orders would read back as coming from {origin!r}"))


def cluster_connection(layers: Layers, alias: str) -> dict[str, str]:
    """Connection keys of one cluster: top-level values overlaid by `<alias>.` values."""
    connection = {k: e.value for k, e in layers.top.items() if keys.is_connection_key(k)}
    connection.update({k: e.value for k, e in layers.cluster(alias).items()
                       if keys.is_connection_key(k)})
    return connection


class _FlowBuilder:
    """Resolves one ordered pair `source->target`: flow level, then top level, then default."""

    def __init__(self, loader: _Loader, layers: Layers, source: str, target: str) -> None:
        self.loader = loader
        self.layers = layers
        self.source = source
        self.target = target
        self.flow = layers.flow(source, target)

    def entry(self, key: str) -> Property | None:
        return self.flow.get(key) or self.layers.top.get(key)

    def get(self, key: str, reader: Callable[[str], _T]) -> _T:
        entry = self.entry(key)
        return reader(DEFAULTS[key]) if entry is None else self.loader.read(entry, reader)

    def worker(self, key: str, reader: Callable[[str], _T]) -> _T:
        """Connect-worker keys: flow, then target cluster, then top level, then default."""
        entry = (self.flow.get(key) or self.layers.cluster(self.target).get(key)
                 or self.layers.top.get(key))
        return reader(DEFAULTS[key]) if entry is None else self.loader.read(entry, reader)

    def flag(self, key: str) -> bool:
        return self.get(key, values.parse_bool)

    def seconds(self, key: str) -> float:
        return float(self.get(key, values.parse_non_negative))

    def factor(self, key: str) -> int:
        return self.get(key, values.parse_replication_factor)

    def patterns(self, key: str) -> tuple[str, ...]:
        entry = self.entry(key)
        return parse_list(DEFAULTS[key]) if entry is None else self.loader.patterns(entry)

    def policy(self) -> PolicySettings:
        separator_entry = self.entry("replication.policy.separator")
        return PolicySettings(
            kind=self.get("replication.policy.class", values.parse_policy_class),
            separator=(None if separator_entry is None
                       else self.loader.read(separator_entry, values.parse_separator)),
            internal_topic_separator_enabled=self.flag(
                "replication.policy.internal.topic.separator.enabled"),
        )

    def enabled(self) -> bool:
        """MM2: `s->t.enabled` decides; otherwise a top-level `enabled` counts, but only for
        pairs that have a herder at all, i.e. whose heartbeats are on (spec §7.2)."""
        own = self.flow.get("enabled")
        if own is not None:
            return self.loader.read(own, values.parse_bool)
        top = self.layers.top.get("enabled")
        if top is None or not self.loader.read(top, values.parse_bool):
            return False
        return self.flag("emit.heartbeats.enabled")

    def build(self) -> FlowSettings:
        location: Literal["source", "target"] = (
            "source" if self.get("offset-syncs.topic.location", values.parse_location)
            == "source" else "target")
        use_defaults_from: Literal["source", "target"] = (
            "source" if self.get("use.defaults.from", values.parse_use_defaults_from)
            == "source" else "target")
        flow = FlowSettings(
            source=self.source, target=self.target, enabled=self.enabled(),
            topics=self.patterns("topics"), topics_exclude=self.patterns("topics.exclude"),
            groups=self.patterns("groups"), groups_exclude=self.patterns("groups.exclude"),
            config_properties_exclude=self.patterns("config.properties.exclude"),
            use_defaults_from=use_defaults_from, policy=self.policy(),
            replication_factor=self.factor("replication.factor"),
            refresh_topics_enabled=self.flag("refresh.topics.enabled"),
            refresh_topics_interval_s=self.seconds("refresh.topics.interval.seconds"),
            refresh_groups_enabled=self.flag("refresh.groups.enabled"),
            refresh_groups_interval_s=self.seconds("refresh.groups.interval.seconds"),
            sync_topic_configs_enabled=self.flag("sync.topic.configs.enabled"),
            sync_topic_configs_interval_s=self.seconds("sync.topic.configs.interval.seconds"),
            sync_topic_acls_enabled=self.flag("sync.topic.acls.enabled"),
            sync_topic_acls_interval_s=self.seconds("sync.topic.acls.interval.seconds"),
            emit_offset_syncs_enabled=self.flag("emit.offset-syncs.enabled"),
            offset_syncs_topic_location=location,
            offset_syncs_topic_replication_factor=self.factor(
                "offset-syncs.topic.replication.factor"),
            offset_lag_max=self.get("offset.lag.max", values.parse_non_negative),
            heartbeats_replication_enabled=self.flag("heartbeats.replication.enabled"),
            emit_heartbeats_enabled=self.flag("emit.heartbeats.enabled"),
            emit_heartbeats_interval_s=self.seconds("emit.heartbeats.interval.seconds"),
            heartbeats_topic_replication_factor=self.factor(
                "heartbeats.topic.replication.factor"),
            emit_checkpoints_enabled=self.flag("emit.checkpoints.enabled"),
            emit_checkpoints_interval_s=self.seconds("emit.checkpoints.interval.seconds"),
            checkpoints_topic_replication_factor=self.factor(
                "checkpoints.topic.replication.factor"),
            sync_group_offsets_enabled=self.flag("sync.group.offsets.enabled"),
            sync_group_offsets_interval_s=self.seconds("sync.group.offsets.interval.seconds"),
            consumer_poll_timeout_ms=self.get("consumer.poll.timeout.ms",
                                              values.parse_non_negative),
            offset_storage_replication_factor=self.worker("offset.storage.replication.factor",
                                                          values.parse_replication_factor),
            offset_flush_interval_ms=self.worker("offset.flush.interval.ms",
                                                 values.parse_non_negative),
            clients=self.clients(),
            properties=_Redacted({**{k: e.value for k, e in self.layers.top.items()},
                                  **{k: e.value for k, e in self.flow.items()}}),
            admin_timeout_ms=self.get("admin.timeout.ms", values.parse_non_negative),
            canary=CanarySettings(
                enabled=self.flag("canary.enabled"),
                interval_ms=self.get("canary.interval.ms", values.parse_positive),
                latency_slo_ms=self.get("canary.latency.slo.ms", values.parse_positive)),
            audit=self._audit(),
        )
        if flow.enabled:
            self._check_enabled(flow)
        return flow

    def _audit(self) -> AuditSettings:
        """`audit.*`, checked against the canary interval: a window shorter than one canary
        interval could close without a single probe in it."""
        window = self.get("audit.window.ms", values.parse_positive)
        interval = self.get("canary.interval.ms", values.parse_positive)
        if window < interval:
            entry = self.entry("audit.window.ms") or self.entry("canary.interval.ms")
            raise self.loader.error(entry, "audit.window.ms", (
                f"is {window} ms for {self.source}->{self.target}, shorter than "
                f"canary.interval.ms ({interval} ms): a window must span at least one canary "
                "interval"))
        return AuditSettings(enabled=self.flag("audit.enabled"), window_ms=window,
                             grace_ms=self.get("audit.grace.ms", values.parse_non_negative))

    def _check_enabled(self, flow: FlowSettings) -> None:
        """Rules MM2 applies when it validates the connectors of an enabled flow."""
        if flow.emit_offset_syncs_enabled:
            return
        switch = self.entry("emit.offset-syncs.enabled")
        assert switch is not None  # the default is true
        conflicting = [e for k, e in self.flow.items() if k.startswith(_OFFSET_SYNCS_KEYS)]
        conflicting += [e for k, e in self.layers.top.items()
                        if k.startswith(_OFFSET_SYNCS_KEYS) and k in keys.FLOW_KEYS]
        if conflicting:
            other = conflicting[0]
            raise self.loader.error(switch, switch.key, (
                f"is false for {flow.name}, but {other.key} (line {other.line}) configures the "
                "offset-syncs topic; MM2 rejects the source connector of such a flow -- remove "
                f"{other.key} or enable offset syncs"))
        if flow.emit_checkpoints_enabled or flow.sync_group_offsets_enabled:
            self.loader.warnings.append(ConfigWarning(switch.key, (
                f"{flow.name} emits no offset syncs, so it emits no checkpoints and syncs no "
                "group offsets (MM2 rejects its checkpoint connector)"), switch.line))

    def clients(self) -> ClientSettings:
        """Client configs with the precedence of spec §7.3 (see `DIFFERENCES_FROM_MM2`)."""
        def client(alias: str, role: str) -> dict[str, str]:
            prefix = role + "."
            config = _Redacted(cluster_connection(self.layers, alias))
            for store, only_clients in ((self.layers.top, True), (self.flow, True),
                                        (self.layers.cluster(alias), False)):
                config.update({k[len(prefix):]: e.value for k, e in store.items()
                               if k.startswith(prefix)
                               and (keys.is_client_key(k) or not only_clients)})
            return config

        source_consumer = client(self.source, "consumer")
        source_consumer["enable.auto.commit"] = "false"
        source_consumer.setdefault("auto.offset.reset", "earliest")
        target_producer = client(self.target, "producer")
        target_producer.setdefault("acks", "all")
        return ClientSettings(
            source_consumer=source_consumer,
            source_producer=client(self.source, "producer"),
            source_admin=client(self.source, "admin"),
            target_consumer=client(self.target, "consumer"),
            target_producer=target_producer,
            target_admin=client(self.target, "admin"),
        )
