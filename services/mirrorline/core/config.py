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

from collections.abc import Callable, Iterable, Mapping
from typing import Final, TypeVar

from mirrorline.core import _config_decl as decl
from mirrorline.core import _config_keys as keys
from mirrorline.core import _config_values as values
from mirrorline.core._config_flow import FlowBuilder
from mirrorline.core._config_keys import (
    DEFAULTS,
    MIRRORLINE_DEFAULT_OVERRIDES,
    MIRRORLINE_KEYS,
    MM2_DEFAULTS,
)
from mirrorline.core._config_layers import (
    Layers,
    cluster_connection,
    split_levels,
    unknown_key_warnings,
)
from mirrorline.core._config_providers import (
    NO_LOOKUPS,
    ProviderError,
    ProviderLookups,
    Providers,
    has_reference,
)
from mirrorline.core._config_warnings import (
    JAVA_TRIM,
    PATTERN_KEYS,
    idiom_warnings,
    inline_comment_warnings,
    separator_warnings,
)
from mirrorline.core.errors import ConfigError
from mirrorline.core.filters import compile_patterns, parse_list
from mirrorline.core.policy import ReplicationPolicy, make_policy
from mirrorline.core.properties import Property, duplicates, last_wins, parse_properties
from mirrorline.core.settings import (
    ClusterSettings,
    ConfigWarning,
    FlowSettings,
    MirrorSettings,
    PolicySettings,
)
from mirrorline.core.typos import or_list

__all__ = [
    "DEFAULTS",
    "DIFFERENCES_FROM_MM2",
    "MIRRORLINE_DEFAULT_OVERRIDES",
    "MIRRORLINE_KEYS",
    "MM2_DEFAULTS",
    "NO_LOOKUPS",
    "ProviderLookups",
    "decode_config",
    "mask",
    "parse_config",
    "policy_from_properties",
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
    "ignores them silently. An unknown key nearly equal to a known one is a likely typo: "
    "its warning asks 'did you mean ...?', and `config check` fails on it.",
    "Invalid values that MM2 only detects late or never are rejected at start-up: negative "
    "intervals or offset.lag.max, booleans other than true/false (also for "
    "<source>-><target>.enabled, which MM2 reads as false), cluster aliases that are not "
    "valid in topic names or contain the replication separator, flow keys that name clusters "
    "missing from clusters, and emit.offset-syncs.enabled=false together with an "
    "offset-syncs.* key (MM2 then silently runs no source connector).",
    "security.protocol is checked wherever it appears (top level, cluster, client "
    "overrides), not only when a client is created.",
    "Config providers: only Kafka's EnvVarConfigProvider, FileConfigProvider and "
    "DirectoryConfigProvider exist, and they resolve every value of the file; a reference "
    "that cannot be resolved (undeclared provider, unset variable, missing file or key) is "
    "an error, where Kafka leaves the ${...} text in the value. They never resolve flow "
    "properties sent through the Admin API (a reference there is refused).",
    "A value containing ' #' is reported on every start (Java properties have no inline "
    "comments, so the comment is part of the value); the value itself is read as MM2 reads "
    "it.",
    "Only the built-in replication policies and topic/group/config-property filters exist; "
    "any other replication.policy.class or *.filter.class is rejected (MM2 would load the "
    "Java class).",
    "The file is read as UTF-8 (a byte-order mark is skipped; ISO-8859-1 is used only when "
    "the bytes are not valid UTF-8); MM2 always reads ISO-8859-1.",
    "Trust and key stores may be PEM or PKCS12; JKS stores are rejected with the keytool "
    "command that converts them to PKCS12. Every cluster's stores are loaded and checked "
    "before any service starts.",
    "SASL/OAUTHBEARER is not supported; PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and GSSAPI are.",
)

_T = TypeVar("_T")


def redact(key: str, value: str) -> str:
    """`value`, or `[hidden]` (Kafka's own marker) when `key` holds a secret."""
    return "[hidden]" if keys.is_secret(key) else value


def mask(key: str, value: str, secrets: frozenset[str] = frozenset()) -> str:
    """`redact`, and also hide any value holding something a config provider resolved."""
    if any(secret and secret in value for secret in secrets):
        return "[hidden]"
    return redact(key, value)


class _Redacted(dict[str, str]):
    """A plain dict whose repr hides secret values: logging a settings object leaks nothing."""

    def __init__(self, data: dict[str, str], secrets: frozenset[str] = frozenset()) -> None:
        super().__init__(data)
        self.secrets = secrets

    def __repr__(self) -> str:
        return repr({key: mask(key, value, self.secrets) for key, value in self.items()})


#: Bounds that keep one file (or one imported request) from costing unbounded work.
MAX_CLUSTERS = 64
MAX_SEPARATOR = values.MAX_SEPARATOR
MAX_PATTERN_LIST = 16_384


def policy_from_properties(properties: Mapping[str, str]) -> ReplicationPolicy:
    """The policy MM2's `MirrorClientConfig` builds from one flat property map, with the
    values checked exactly as the loader checks them in a file (a bad one is a
    `ConfigError` naming the key): `replication.policy.class`, `.separator`,
    `.internal.topic.separator.enabled`, and `source.cluster.alias` for the identity policy
    (Java hands the policy every property)."""
    def read(key: str, reader: Callable[[str], _T]) -> _T | None:
        raw = properties.get(key)
        if raw is None:
            return None
        try:
            return reader(raw.strip(JAVA_TRIM))
        except values.BadValue as e:
            raise ConfigError(key, f"invalid value {values.shown(key, raw)}: {e}") from None

    kind = read("replication.policy.class", values.parse_policy_class) or "default"
    internal = read("replication.policy.internal.topic.separator.enabled", values.parse_bool)
    alias = read("source.cluster.alias", values.parse_naming_alias)
    return make_policy(PolicySettings(
        kind=kind, separator=read("replication.policy.separator", values.parse_separator),
        internal_topic_separator_enabled=True if internal is None else internal),
        alias or None)


def decode_config(data: bytes) -> str:
    """The text of a configuration file's bytes: UTF-8 (a byte-order mark skipped), else
    ISO-8859-1 (MM2's encoding) when the bytes are not valid UTF-8."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("iso-8859-1")


def parse_config(text: str, *, source: str | None = None,
                 lookups: ProviderLookups = NO_LOOKUPS) -> MirrorSettings:
    """Resolve MM2 properties text; `source` names the file in messages; `lookups`: what
    the config providers may read (the default: no environment, no files --
    `mirrorline.configfile` passes the host's)."""
    return _Loader(parse_properties(text, source=source), source, lookups).load()


class _Loader:
    """One run of the loader over one file; holds what every step needs."""

    def __init__(self, entries: list[Property], source: str | None,
                 lookups: ProviderLookups) -> None:
        self.source = source
        self.lookups = lookups
        self.raw = last_wins(entries)
        self.warnings: list[ConfigWarning] = [
            ConfigWarning(later.key, f"set more than once (lines {earlier.line} and "
                                     f"{later.line}); the last value wins", later.line)
            for earlier, later in duplicates(entries)
        ]
        #: Keys whose value came from a config provider, and the resolved strings: secrets.
        self.resolved: set[str] = set()
        self.secrets: frozenset[str] = frozenset()
        secrets: list[str] = []
        self.entries = self._resolve([Property(p.key, p.value.strip(JAVA_TRIM), p.line)
                                      for p in self.raw.values()], secrets)
        self.secrets = frozenset(s for s in secrets if s)

    def _resolve(self, entries: list[Property], secrets: list[str]) -> list[Property]:
        """Replace `${provider:path:key}` references (config providers, as Kafka does)."""
        by_key = {e.key: e for e in entries}
        try:
            providers = Providers({e.key: e.value for e in entries
                                   if keys.is_provider_key(e.key)}, lookups=self.lookups)
        except ProviderError as e:
            entry = by_key.get(e.key or "config.providers")
            raise self.error(entry, e.key or "config.providers", str(e)) from None
        out = []
        for entry in entries:
            if keys.is_provider_key(entry.key) or not has_reference(entry.value):
                out.append(entry)
                continue
            try:
                value, found = providers.resolve(entry.value)
            except ProviderError as e:
                raise self.error(entry, entry.key, str(e)) from None
            secrets.extend(found)
            self.resolved.add(entry.key)
            out.append(Property(entry.key, value.strip(JAVA_TRIM), entry.line))
        return out

    def redacted(self, data: dict[str, str]) -> _Redacted:
        return _Redacted(data, self.secrets)

    def error(self, entry: Property | None, key: str, message: str) -> ConfigError:
        line = entry.line if entry is not None else None
        # No message quotes what a config provider resolved, whatever check produced it.
        for secret in sorted(self.secrets, key=len, reverse=True):
            message = message.replace(secret, "[hidden]")
        return ConfigError(entry.key if entry is not None else key, message, line=line,
                           source=self.source)

    def read(self, entry: Property, reader: Callable[[str], _T]) -> _T:
        try:
            return reader(entry.value)
        except values.BadValue as e:
            shown = ("[hidden]" if entry.key in self.resolved
                     else values.shown(entry.key, entry.value))
            hint = (" (Java properties have no inline comments: the ' #...' is part of the "
                    "value, and MM2 rejects it too)"
                    if values.has_inline_comment(entry.value) else "")
            raise self.error(entry, entry.key, f"invalid value {shown}: {e}{hint}") from None

    def load(self) -> MirrorSettings:
        aliases, clusters_entry = self._aliases()
        layers = split_levels(self.entries, aliases, self.source)
        self._validate(layers)
        self.warnings += inline_comment_warnings(self.raw, layers)
        self.warnings += unknown_key_warnings(self.entries, layers, aliases)
        self.warnings += idiom_warnings(layers)
        everywhere = layers.top.get("enabled")
        if everywhere is not None and self.read(everywhere, values.parse_enabled):
            self.warnings.append(ConfigWarning("enabled", (
                "a top-level enabled=true enables every cluster pair whose heartbeats are on "
                "(as in MM2); prefer <source>-><target>.enabled = true"), everywhere.line))
        clusters = {alias: self._cluster(alias, layers, clusters_entry) for alias in aliases}
        flows: dict[str, FlowSettings] = {}
        for source_alias in aliases:
            for target_alias in aliases:
                if source_alias != target_alias:
                    builder = FlowBuilder(self, layers, source_alias, target_alias)
                    flow = builder.build()
                    self._check_aliases(
                        ((flow.naming_source, builder.entry("source.cluster.alias")),
                         (flow.naming_target, builder.entry("target.cluster.alias"))),
                        flow.policy.separator, clusters_entry)
                    flows[flow.name] = flow
        if not flows:  # a single cluster: check against the top-level separator
            separator = layers.top.get("replication.policy.separator")
            self._check_aliases([(alias, None) for alias in aliases],
                                None if separator is None else separator.value,
                                clusters_entry)
        self.warnings += separator_warnings(layers, flows)
        return MirrorSettings(source_path=self.source, clusters=clusters, flows=flows,
                              warnings=tuple(_unique(self.warnings)),
                              raw=_Redacted({k: e.value for k, e in self.raw.items()}),
                              deployment=self._deployment(layers),
                              secret_values=self.secrets,
                              lines={k: e.line for k, e in self.raw.items()},
                              lookups=self.lookups)

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
        if len(unique) > MAX_CLUSTERS:
            # Every ordered pair is a flow: n clusters make n*(n-1) flow settings.
            raise self.error(entry, "clusters", f"lists {len(unique)} clusters; at most "
                             f"{MAX_CLUSTERS} are supported (every ordered pair is a flow)")
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
                if rest in PATTERN_KEYS and len(entry.value) > MAX_PATTERN_LIST:
                    raise self.error(entry, entry.key, (
                        f"is {len(entry.value)} characters long; at most {MAX_PATTERN_LIST}"))
                reader = decl.reader_for(rest)
                if reader is not None:
                    self.read(entry, reader)
                if rest in PATTERN_KEYS:
                    self.patterns(entry)
        for cluster_store in layers.clusters.values():
            for rest, entry in cluster_store.items():
                relevant = (keys.is_connection_key(rest) or rest in keys.WORKER_KEYS
                            or rest.startswith(keys.CLIENT_PREFIXES))
                reader = decl.reader_for(rest)
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
            wanted = {f"{alias}.bootstrap.servers", "bootstrap.servers"}
            typo = next((w for w in self.warnings if wanted & set(w.suggestions)), None)
            if typo is not None:  # a misspelt key: point at its line
                raise ConfigError(typo.key, (
                    f"cluster {alias!r} has no bootstrap servers -- did you mean "
                    f"{or_list(sorted(wanted & set(typo.suggestions)))}?"), line=typo.line,
                    source=self.source)
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
        return ClusterSettings(alias, bootstrap, self.redacted(connection))

    def _check_aliases(self, aliases: Iterable[tuple[str, Property | None]],
                       separator: str | None, clusters_entry: Property) -> None:
        """Aliases must not contain the separator: `us.west.orders` reads back as from `us`.
        (An empty separator is in every alias; its own warning covers what it breaks.)"""
        separator = "." if separator is None else separator
        for alias, own in aliases:
            if separator and separator in alias:
                origin = alias.split(separator, 1)[0]
                where = own or clusters_entry
                raise self.error(where, where.key, (
                    f"cluster alias {alias!r} contains the replication policy separator "
                    f"{separator!r} (replication.policy.separator); a remote topic "
                    f"{alias + separator}orders would read back as coming from {origin!r}"))


def _unique(warnings: list[ConfigWarning]) -> list[ConfigWarning]:
    """Each warning once (a key filed at two levels may be judged twice), in file order."""
    return sorted(dict.fromkeys(warnings),
                  key=lambda w: (w.line is None, w.line if w.line is not None else 0))
