"""Resolving one flow `source->target` of an MM2 file into `FlowSettings`.

Private helper of `mirrorline.core.config`: a flow-level key wins over the top-level key,
which wins over the default; Connect-worker keys also look at the target cluster; client
configs are layered as MirrorMakerConfig layers them (see `DIFFERENCES_FROM_MM2` in config.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Final, Literal, Protocol, TypeVar, cast

from mirrorline.core import _config_decl as decl
from mirrorline.core import _config_keys as keys
from mirrorline.core import _config_values as values
from mirrorline.core._config_keys import DEFAULTS
from mirrorline.core._config_layers import Layers, cluster_connection
from mirrorline.core.errors import ConfigError
from mirrorline.core.exactly_once import exactly_once_request
from mirrorline.core.filters import parse_list
from mirrorline.core.offload import OffloadSettings
from mirrorline.core.properties import Property
from mirrorline.core.settings import (
    AuditSettings,
    CanarySettings,
    ClientSettings,
    ConfigWarning,
    FlowSettings,
    PolicySettings,
)

__all__ = ["NEW_TO_DEPRECATED", "FlowBuilder", "LoaderView"]

_OFFSET_SYNCS_KEYS: Final = ("offset-syncs.", "offset-syncs-")
#: New filter key -> its deprecated alias (`topics.exclude` -> `topics.blacklist`).
NEW_TO_DEPRECATED: Final = {new: old for old, new in keys.DEPRECATED_ALIASES.items()}
_T = TypeVar("_T")


class LoaderView(Protocol):
    """What a flow needs from the loader run it is part of."""

    warnings: list[ConfigWarning]

    def read(self, entry: Property, reader: Callable[[str], _T]) -> _T: ...

    def patterns(self, entry: Property) -> tuple[str, ...]: ...

    def error(self, entry: Property | None, key: str, message: str) -> ConfigError: ...

    def redacted(self, data: dict[str, str]) -> dict[str, str]: ...


def _default(key: str, reader: Callable[[str], object]) -> str:
    """The declared default of `key`, checking that the builder reads it with the declared
    reader (one declaration per setting: the builder cannot drift from it)."""
    setting = decl.by_name(key)
    if setting is None or setting.default is None:
        raise LookupError(f"{key}: read by the flow builder but declared without a default "
                          "in core/_config_decl.py")
    if setting.reader is not None and setting.reader is not reader:
        raise LookupError(f"{key}: read with {reader.__name__}, declared with "
                          f"{setting.reader.__name__} in core/_config_decl.py")
    return setting.default


class FlowBuilder:
    """Resolves one ordered pair `source->target`: flow level, then top level, then default."""

    def __init__(self, loader: LoaderView, layers: Layers, source: str, target: str) -> None:
        self.loader = loader
        self.layers = layers
        self.source = source
        self.target = target
        self.flow = layers.flow(source, target)

    def entry(self, key: str) -> Property | None:
        return self.flow.get(key) or self.layers.top.get(key)

    def get(self, key: str, reader: Callable[[str], _T]) -> _T:
        entry = self.entry(key)
        return reader(_default(key, reader)) if entry is None else self.loader.read(entry, reader)

    def worker(self, key: str, reader: Callable[[str], _T]) -> _T:
        """Connect-worker keys: flow, then target cluster, then top level, then default."""
        entry = (self.flow.get(key) or self.layers.cluster(self.target).get(key)
                 or self.layers.top.get(key))
        return reader(_default(key, reader)) if entry is None else self.loader.read(entry, reader)

    def flag(self, key: str) -> bool:
        return self.get(key, values.parse_bool)

    def seconds(self, key: str) -> float:
        return float(self.get(key, values.parse_non_negative))

    def factor(self, key: str) -> int:
        return self.get(key, values.parse_replication_factor)

    def patterns(self, key: str) -> tuple[str, ...]:
        """A pattern list; an exclude list falls back to its deprecated `*.blacklist` alias
        when the new key is set nowhere for the flow (MM2's translateDeprecatedConfigs)."""
        entry = self.entry(key)
        if entry is None and key in NEW_TO_DEPRECATED:
            entry = self.entry(NEW_TO_DEPRECATED[key])
        return parse_list(DEFAULTS[key]) if entry is None else self.loader.patterns(entry)

    def naming_alias(self, key: str) -> str | None:
        """`source.cluster.alias` / `target.cluster.alias` if the file sets it (MM2 fills
        in the flow's own alias only when the key is absent; empty counts as set)."""
        entry = self.entry(key)
        return None if entry is None else self.loader.read(entry, values.parse_naming_alias)

    def policy(self) -> PolicySettings:
        separator_entry = self.entry("replication.policy.separator")
        return PolicySettings(
            kind=self.get("replication.policy.class", values.parse_policy_class),
            separator=(None if separator_entry is None
                       else self.loader.read(separator_entry, values.parse_separator)),
            internal_topic_separator_enabled=self.flag(
                "replication.policy.internal.topic.separator.enabled"),
        )

    def resume_tail_match(self) -> bool:
        """`mirrorline.resume.tail.match` (default true), a boolean like MM2's flags."""
        return self.get("mirrorline.resume.tail.match", values.parse_bool)

    def batch_path(self) -> Literal["auto", "on", "off"]:
        """`mirrorline.batch.path` (default auto)."""
        return cast(Literal["auto", "on", "off"],
                    self.get("mirrorline.batch.path", values.parse_batch_path))

    def enabled(self) -> bool:
        """MM2: `s->t.enabled` decides; otherwise a top-level `enabled` counts, but only for
        pairs that have a herder at all, i.e. whose heartbeats are on (MirrorMakerConfig)."""
        own = self.flow.get("enabled")
        if own is not None:
            return self.loader.read(own, values.parse_enabled)
        top = self.layers.top.get("enabled")
        if top is None or not self.loader.read(top, values.parse_enabled):
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
            properties=self.loader.redacted({**{k: e.value for k, e in self.layers.top.items()},
                                  **self._target_worker_keys(),
                                  **{k: e.value for k, e in self.flow.items()}}),
            admin_timeout_ms=self.get("admin.timeout.ms", values.parse_non_negative),
            source_cluster_alias=self.naming_alias("source.cluster.alias"),
            target_cluster_alias=self.naming_alias("target.cluster.alias"),
            canary=CanarySettings(
                enabled=self.flag("canary.enabled"),
                interval_ms=self.get("canary.interval.ms", values.parse_positive),
                latency_slo_ms=self.get("canary.latency.slo.ms", values.parse_positive)),
            audit=self._audit(),
            sync_mode="plan" if self.get("sync.mode", values.parse_sync_mode) == "plan"
            else "apply",
            sync_topic_acls_mode="full" if self.get("sync.topic.acls.mode",
                                                    values.parse_acls_mode) == "full"
            else "mm2",
            offload=self.offload(),
            resume_tail_match=self.resume_tail_match(),
            batch_path=self.batch_path(),
        )
        flow = self._exactly_once_stays_on_workers(flow)
        if flow.enabled:
            self._check_enabled(flow)
        return flow

    def _target_worker_keys(self) -> dict[str, str]:
        """Worker keys set for the target cluster that the services read from the flow's
        properties (MM2's dedicated mode sets `exactly.once.source.support` per target)."""
        entry = self.layers.cluster(self.target).get("exactly.once.source.support")
        return {} if entry is None else {entry.key: entry.value}

    def _exactly_once_stays_on_workers(self, flow: FlowSettings) -> FlowSettings:
        """The Spark executor copies without transactions: a flow asking for exactly-once
        runs on the replicator workers unless `mirrorline.executor` says otherwise, and
        one that requires it cannot be sent to Spark at all."""
        request = exactly_once_request(flow, flow.properties)
        if request is None or flow.offload.executor == "workers":
            return flow
        entry = self.entry("mirrorline.executor")
        if entry is None:
            return replace(flow, offload=replace(flow.offload, executor="workers"))
        if request.required:
            raise self.loader.error(entry, entry.key, (
                f"= {flow.offload.executor} would copy partitions on the Spark executor, "
                f"which runs without transactions, but {request.key} = {request.value} "
                "requires them; set mirrorline.executor = workers"))
        return flow

    def offload(self) -> OffloadSettings:
        """Where the flow's partitions run (`mirrorline.executor`, `mirrorline.spark.*`)."""
        settings = OffloadSettings(
            executor=self.get("mirrorline.executor", values.parse_executor),
            offload_bytes_per_second=self.get("mirrorline.spark.offload.bytes.per.second",
                                              values.parse_non_negative),
            sustain_s=self.get("mirrorline.spark.offload.sustain.seconds",
                               values.parse_non_negative),
            offload_lag_records=self.get("mirrorline.spark.offload.lag.records",
                                         values.parse_non_negative),
            reclaim_lag_records=self.get("mirrorline.spark.reclaim.lag.records",
                                         values.parse_non_negative))
        if settings.offload_lag_records and settings.reclaim_lag_records \
                >= settings.offload_lag_records:
            entry = self.entry("mirrorline.spark.reclaim.lag.records") \
                or self.entry("mirrorline.spark.offload.lag.records")
            message = (f"mirrorline.spark.reclaim.lag.records ({settings.reclaim_lag_records}) "
                       "must be below mirrorline.spark.offload.lag.records "
                       f"({settings.offload_lag_records}), or partitions would bounce "
                       "between the workers and Spark")
            if entry is None:
                raise ConfigError("mirrorline.spark.reclaim.lag.records", message)
            raise self.loader.error(entry, entry.key, message)
        return settings
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
                             grace_ms=self.get("audit.grace.ms", values.parse_non_negative),
                             missing_after_ms=self.get("audit.missing.after.ms",
                                                       values.parse_non_negative))

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
        """Client configs with MirrorMakerConfig's precedence (see `DIFFERENCES_FROM_MM2`)."""
        origins: dict[tuple[str, str, str], Property] = {}

        def client(alias: str, role: str) -> dict[str, str]:
            prefix = role + "."
            config = self.loader.redacted(cluster_connection(self.layers, alias))
            for store, only_clients in ((self.layers.top, True), (self.flow, True),
                                        (self.layers.cluster(alias), False)):
                for k, e in store.items():
                    if k.startswith(prefix) and (keys.is_client_key(k) or not only_clients):
                        config[k[len(prefix):]] = e.value
                        origins[alias, role, k[len(prefix):]] = e
            return config

        source_consumer = client(self.source, "consumer")
        source_consumer["enable.auto.commit"] = "false"
        source_consumer.setdefault("auto.offset.reset", "earliest")
        target_producer = client(self.target, "producer")
        target_producer.setdefault("acks", "all")
        if target_producer["acks"].strip() == "0":
            # No acknowledgement carries no offset: progress, offset syncs and the offset
            # map could never be written, so the flow would copy without a trace.
            entry = origins.get((self.target, "producer", "acks"))
            raise self.loader.error(entry, f"{self.target}.producer.acks", (
                "= 0 cannot be used for the target producer: without acknowledgements "
                "Mirrorline never learns where a record landed, so it could record no "
                "progress, offset syncs or checkpoints; use all (the default) or 1"))
        return ClientSettings(
            source_consumer=source_consumer,
            source_producer=client(self.source, "producer"),
            source_admin=client(self.source, "admin"),
            target_consumer=client(self.target, "consumer"),
            target_producer=target_producer,
            target_admin=client(self.target, "admin"),
        )
