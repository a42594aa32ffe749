"""Every setting Mirrorline reads, declared once (in the style of Kafka's `ConfigDef`).

Private helper of `mirrorline.core.config`. One `Setting` per key says all there is to know
about it: where it may be written (its level), its type and the reader that checks a value,
MM2's default and Mirrorline's (and why they differ), what it does, and whether Mirrorline
acts on it yet. Everything else is derived from `SETTINGS`: the defaults and key sets of
`_config_keys` (so the unknown-key and "did you mean" warnings of `_config_layers` and
`typos`), the not-acted-on warnings, the readers of `reader_for`, `config check`'s list of
changed defaults and the key reference `docs/configuration-keys.md` (`key_reference`,
written by `mirrorline dev docs`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from mirrorline.core import _config_values as values

__all__ = [
    "FILTER_CLASSES",
    "SETTINGS",
    "Kind",
    "Setting",
    "by_name",
    "key_reference",
    "reader_for",
]

_MIRROR: Final = "org.apache.kafka.connect.mirror."


class Kind(enum.Enum):
    """What a key is, which decides where it may be written (its level)."""

    #: MM2 connector property: top level (every flow) or `<src>-><tgt>.` (one flow).
    CONNECTOR = "connector"
    #: Connect-worker property MM2 depends on: `<src>-><tgt>.`, `<target>.`, then top level.
    WORKER = "worker"
    #: A Mirrorline flow key (no MM2 equivalent), resolved like a connector property.
    MIRRORLINE_FLOW = "mirrorline flow"
    #: MM2's naming aliases, which dedicated mode fills in only when absent.
    NAMING = "naming"
    #: MM2's exactly-once keys (KIP-618).
    EXACTLY_ONCE = "exactly-once"
    #: A deprecated alias of another key (KIP-629).
    DEPRECATED = "deprecated"
    #: The deployment: clusters and how to reach them (top level or `<alias>.`).
    CLUSTER = "cluster"
    #: Top level only: Mirrorline's deployment-wide keys and config providers.
    TOP = "top"


LEVELS: Final[dict[Kind, str]] = {
    Kind.CONNECTOR: "top, flow",
    Kind.WORKER: "top, target cluster, flow",
    Kind.MIRRORLINE_FLOW: "top, flow",
    Kind.NAMING: "top, flow",
    Kind.EXACTLY_ONCE: "top, flow (exactly.once.source.support: also target cluster)",
    Kind.DEPRECATED: "top, flow",
    Kind.CLUSTER: "top, cluster",
    Kind.TOP: "top",
}


@dataclass(frozen=True)
class Setting:
    name: str
    kind: Kind
    #: The type as the reference shows it.
    type: str
    doc: str
    #: Checks a (trimmed) value and returns it typed; None: checked elsewhere (lists of
    #: patterns, client settings) or free text.
    reader: Callable[[str], object] | None = None
    #: MM2's default, exactly as its ConfigDef declares it; None: MM2 has no such key or no
    #: default.
    mm2_default: str | None = None
    #: Mirrorline's default; None: the key has none (it is optional or required).
    default: str | None = None
    #: Why Mirrorline's default differs from MM2's (required when it does).
    why: str = ""
    #: None: Mirrorline acts on the key. Otherwise why it is read and checked but has no
    #: effect yet (warned about wherever the key is written).
    not_acted_on: str | None = None
    #: The key that replaced this deprecated one.
    replaced_by: str | None = None
    #: Whose key it is, for the reference: "MM2" or "Mirrorline".
    origin: str = "MM2"


def _filter_class(default: str) -> Callable[[str], str]:
    accepted = frozenset({default, default.removeprefix(_MIRROR)})

    def parse(value: str) -> str:
        if value not in accepted:
            raise values.BadValue(f"custom filter classes cannot run in Mirrorline; remove the "
                                  f"key or set it to {default} and use the pattern lists "
                                  "instead")
        return value
    return parse


_RF_WHY: Final = ("MM2's default fails on clusters with fewer brokers; -1 asks the broker "
                  "for its default.replication.factor")
_BOOL, _LIST, _RF = "boolean", "list of regular expressions", "replication factor"


def _connector(name: str, type_: str, mm2: str, doc: str,
               reader: Callable[[str], object] | None = None, *, ours: str | None = None,
               why: str = "") -> Setting:
    return Setting(name, Kind.CONNECTOR, type_, doc, reader, mm2,
                   mm2 if ours is None else ours, why)


def _flag(name: str, mm2: str, doc: str) -> Setting:
    return _connector(name, _BOOL, mm2, doc, values.parse_bool)


def _seconds(name: str, mm2: str, doc: str, *, ours: str | None = None,
             why: str = "") -> Setting:
    return _connector(name, "seconds", mm2, doc, values.parse_non_negative, ours=ours, why=why)


def _factor(name: str, doc: str) -> Setting:
    return _connector(name, _RF, "3", doc, values.parse_replication_factor, ours="-1",
                      why=_RF_WHY)


def _ours(name: str, type_: str, default: str | None, doc: str,
          reader: Callable[[str], object] | None, kind: Kind = Kind.MIRRORLINE_FLOW) -> Setting:
    return Setting(name, kind, type_, doc, reader, None, default, origin="Mirrorline")


SETTINGS: Final[tuple[Setting, ...]] = (
    # -- the deployment -------------------------------------------------------------------
    Setting("clusters", Kind.TOP, "list of aliases",
            "The cluster aliases; every ordered pair of them is a possible flow."),
    Setting("bootstrap.servers", Kind.CLUSTER, "list of host:port",
            "Where a cluster's brokers are (written `<alias>.bootstrap.servers`)."),
    Setting("security.protocol", Kind.CLUSTER, "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
            "How every client of the cluster connects; `ssl.*` and `sasl.*` keys beside it "
            "configure the protocol.", values.parse_security_protocol),
    Setting("config.providers", Kind.TOP, "list of names",
            "Kafka's config providers (env, file, directory) resolving `${name:path:key}` in "
            "values; declare each with `config.providers.<name>.class`."),
    # -- flows: MM2's connector properties -------------------------------------------------
    _connector("enabled", _BOOL, "false",
               "Whether the flow runs (`<src>-><tgt>.enabled`; a top-level `enabled = true` "
               "switches on every pair whose heartbeats are on, as in MM2).",
               values.parse_enabled),
    _connector("topics", _LIST, ".*", "Source topics the flow replicates."),
    _connector("topics.exclude", _LIST, r".*[\-\.]internal, .*\.replica, __.*",
               "Source topics it never replicates (wins over `topics`)."),
    _connector("groups", _LIST, ".*", "Consumer groups whose offsets are checkpointed."),
    _connector("groups.exclude", _LIST, "console-consumer-.*, connect-.*, __.*",
               "Consumer groups never checkpointed (wins over `groups`)."),
    _connector("config.properties.exclude", _LIST,
               r"follower\.replication\.throttled\.replicas, "
               r"leader\.replication\.throttled\.replicas, "
               r"message\.timestamp\.difference\.max\.ms, message\.timestamp\.type, "
               r"unclean\.leader\.election\.enable, min\.insync\.replicas",
               "Topic configs never copied to the remote topic."),
    _connector("use.defaults.from", "source or target", "target",
               "Which cluster's broker defaults count when topic configs are compared.",
               values.parse_use_defaults_from),
    _connector("topic.filter.class", "class", _MIRROR + "DefaultTopicFilter",
               "Only MM2's default filter runs; use the pattern lists.",
               _filter_class(_MIRROR + "DefaultTopicFilter")),
    _connector("group.filter.class", "class", _MIRROR + "DefaultGroupFilter",
               "Only MM2's default filter runs; use the pattern lists.",
               _filter_class(_MIRROR + "DefaultGroupFilter")),
    _connector("config.property.filter.class", "class", _MIRROR + "DefaultConfigPropertyFilter",
               "Only MM2's default filter runs; use `config.properties.exclude`.",
               _filter_class(_MIRROR + "DefaultConfigPropertyFilter")),
    _connector("replication.policy.class", "class", _MIRROR + "DefaultReplicationPolicy",
               "How remote topics are named: MM2's DefaultReplicationPolicy (`<alias>.<topic>`) "
               "or IdentityReplicationPolicy (names kept).", values.parse_policy_class),
    _connector("replication.policy.separator", "string", ".",
               "Between alias and topic in remote names (at most 16 characters; empty is "
               "legal, with a warning).", values.parse_separator),
    _flag("replication.policy.internal.topic.separator.enabled", "true",
          "Whether internal topic names use the separator too (read only with the separator)."),
    _connector("replication.factor", _RF, "2",
               "Replication factor of new remote topics (-1: the broker's "
               "default.replication.factor, else min(3, brokers)).",
               values.parse_replication_factor, ours="-1",
               why="MM2's default fails on single-broker clusters; -1 asks the broker for "
                   "its default.replication.factor"),
    _flag("refresh.topics.enabled", "true", "Whether new source topics are discovered."),
    _seconds("refresh.topics.interval.seconds", "600", "How often source topics are listed.",
             ours="30", why="new topics start replicating within seconds instead of up to "
                            "ten minutes later"),
    _flag("refresh.groups.enabled", "true", "Whether new consumer groups are discovered."),
    _seconds("refresh.groups.interval.seconds", "600", "How often consumer groups are listed.",
             ours="30", why="new consumer groups get checkpoints within seconds instead of up "
                            "to ten minutes later"),
    _flag("sync.topic.configs.enabled", "true",
          "Whether config sync keeps remote topic configs and partition counts in line."),
    _seconds("sync.topic.configs.interval.seconds", "600", "How often topic configs are compared.",
             ours="60", why="a config changed on either side shows up as drift (and is "
                            "reverted) within a minute; one round costs two DescribeConfigs"),
    _flag("sync.topic.acls.enabled", "true", "Whether config sync copies topic ACLs."),
    _seconds("sync.topic.acls.interval.seconds", "600", "How often ACLs are compared.",
             ours="60", why="ACL changes reach the target within a minute; one round costs two "
                            "DescribeAcls"),
    _flag("emit.offset-syncs.enabled", "true",
          "Whether offset syncs are written (needed for checkpoints)."),
    _connector("offset-syncs.topic.location", "source or target", "source",
               "Which cluster holds `mm2-offset-syncs.<other alias>.internal`.",
               values.parse_location),
    _factor("offset-syncs.topic.replication.factor", "Replication factor of the offset-syncs "
            "topic."),
    _connector("offset.lag.max", "records", "100",
               "How far the target may run ahead of the newest offset sync.",
               values.parse_non_negative),
    _flag("heartbeats.replication.enabled", "true", "Whether heartbeats topics are replicated."),
    _flag("emit.heartbeats.enabled", "true",
          "Whether the heartbeat service writes heartbeats for the flow."),
    _seconds("emit.heartbeats.interval.seconds", "1", "How often a heartbeat is written."),
    _factor("heartbeats.topic.replication.factor", "Replication factor of the heartbeats topic."),
    _flag("emit.checkpoints.enabled", "true", "Whether consumer group offsets are checkpointed."),
    _seconds("emit.checkpoints.interval.seconds", "60", "How often checkpoints are written.",
             ours="5", why="translated group offsets lag at most a few seconds behind, so a "
                           "failover replays less"),
    _factor("checkpoints.topic.replication.factor", "Replication factor of the checkpoints "
            "topic."),
    _flag("sync.group.offsets.enabled", "false",
          "Whether translated offsets are committed to idle groups on the target."),
    _seconds("sync.group.offsets.interval.seconds", "60", "How often group offsets are synced."),
    _connector("consumer.poll.timeout.ms", "milliseconds", "1000",
               "How long one poll of the source waits for records.", values.parse_non_negative),
    _connector("admin.timeout.ms", "milliseconds", "60000",
               "Upper bound of each admin-client call.", values.parse_non_negative),
    # -- MM2's Connect-worker properties ---------------------------------------------------
    Setting("offset.storage.replication.factor", Kind.WORKER, _RF,
            "Replication factor of the progress topic `mm2-offsets.<source>.internal`.",
            values.parse_replication_factor, "3", "-1", _RF_WHY),
    Setting("offset.flush.interval.ms", Kind.WORKER, "milliseconds",
            "How often progress and delayed offset syncs are flushed.",
            values.parse_non_negative, "60000", "5000",
            "offset syncs and progress are flushed often, so a restart or failover replays "
            "less"),
    # -- MM2's naming aliases and exactly-once keys -----------------------------------------
    Setting("source.cluster.alias", Kind.NAMING, "alias",
            "The source alias used in topic names (remote topics, checkpoints, offset syncs); "
            "default: the flow's own.", values.parse_naming_alias),
    Setting("target.cluster.alias", Kind.NAMING, "alias",
            "The target alias used in topic names (the offset-syncs topic on the source); "
            "default: the flow's own.", values.parse_naming_alias),
    Setting("exactly.once.support", Kind.EXACTLY_ONCE, "requested or required",
            "Asks for exactly-once copying (transactions on the target)."),
    Setting("exactly.once.source.support", Kind.EXACTLY_ONCE, "enabled, preparing or disabled",
            "The Connect worker's switch for exactly-once source connectors."),
    # -- deprecated aliases (KIP-629) ------------------------------------------------------
    Setting("topics.blacklist", Kind.DEPRECATED, _LIST, "Old name of `topics.exclude`.",
            replaced_by="topics.exclude"),
    Setting("groups.blacklist", Kind.DEPRECATED, _LIST, "Old name of `groups.exclude`.",
            replaced_by="groups.exclude"),
    Setting("config.properties.blacklist", Kind.DEPRECATED, _LIST,
            "Old name of `config.properties.exclude`.", replaced_by="config.properties.exclude"),
    # -- Mirrorline's flow keys ------------------------------------------------------------
    _ours("sync.mode", "apply or plan", "apply",
          "apply: config sync changes the target; plan: it only reports drift.",
          values.parse_sync_mode),
    _ours("sync.topic.acls.mode", "mm2 or full", "mm2",
          "mm2: MM2's ACL rules; full: also prefixed and group ACLs, and removal of ACLs it "
          "made.", values.parse_acls_mode),
    _ours("mirrorline.executor", "workers, spark or auto", "auto",
          "Where the flow's partitions run: workers, spark, or auto (busy partitions on "
          "Spark). A flow asking for exactly-once runs on the workers (auto becomes "
          "workers; spark with exactly-once required is an error).",
          values.parse_executor),
    _ours("mirrorline.batch.path", "auto, on or off", "auto",
          "How the replicator and the Spark executor copy: on: the source's record "
          "batches go to the target as "
          "they are (only their headers rewritten), except batches the target would refuse; "
          "auto: the same, but a partition whose batches are small has its records "
          "re-batched; off: every record is decoded and re-batched (MM2's way). See "
          "docs/batch-path.md.", values.parse_batch_path),
    _ours("mirrorline.spark.offload.bytes.per.second", "bytes per second", "10485760",
          "A partition this busy (sustained) moves to Spark under auto.",
          values.parse_non_negative),
    _ours("mirrorline.spark.offload.sustain.seconds", "seconds", "60",
          "How long the offload thresholds must hold.", values.parse_non_negative),
    _ours("mirrorline.spark.offload.lag.records", "records", "1000000",
          "A partition this far behind moves to Spark under auto (0: never).",
          values.parse_non_negative),
    _ours("mirrorline.spark.reclaim.lag.records", "records", "10000",
          "A partition back under this lag returns to the workers.", values.parse_non_negative),
    _ours("canary.enabled", _BOOL, "true", "Whether the heartbeat service probes the flow.",
          values.parse_bool),
    _ours("canary.interval.ms", "milliseconds", "1000", "How often a canary record is sent.",
          values.parse_positive),
    _ours("canary.latency.slo.ms", "milliseconds", "5000",
          "End-to-end latency above which the canary reports the flow DEGRADED.",
          values.parse_positive),
    _ours("audit.enabled", _BOOL, "true",
          "Whether per-window counts and checksums are compared.", values.parse_bool),
    _ours("audit.window.ms", "milliseconds", "60000",
          "Length of one audit window (at least canary.interval.ms).", values.parse_positive),
    _ours("audit.grace.ms", "milliseconds", "10000",
          "How long after a window ends it is judged.", values.parse_non_negative),
    _ours("audit.missing.after.ms", "milliseconds", "300000",
          "How long a window short of records waits before it is judged MISSING.",
          values.parse_non_negative),
    # -- Mirrorline's deployment-wide keys -------------------------------------------------
    _ours("mirrorline.deployment", "name", None,
          "Names the deployment: prefixes its control-plane topics, so several can share a "
          "home cluster.", None, Kind.TOP),
    _ours("mirrorline.resume.tail.match", _BOOL, "true",
          "A resuming owner matches the target's tail against the source; false: durable "
          "progress alone (at-least-once, as MM2). `<source>-><target>.` sets it for one "
          "flow.", values.parse_bool, Kind.TOP),
    _ours("mirrorline.grpc.tls.certificate", "path", None,
          "PEM certificate the services serve gRPC with.", None, Kind.TOP),
    _ours("mirrorline.grpc.tls.key", "path", None, "Its private key.", None, Kind.TOP),
    _ours("mirrorline.grpc.tls.ca", "path", None,
          "CA that clients and peers are verified against.", None, Kind.TOP),
    _ours("mirrorline.grpc.tls.client.auth.required", _BOOL, "false",
          "Whether gRPC clients must present certificates.", None, Kind.TOP),
    _ours("mirrorline.grpc.tls.server.name", "host name", None,
          "The name services verify each other's certificates for.", None, Kind.TOP),
    _ours("mirrorline.grpc.insecure", _BOOL, "false",
          "Allows plaintext gRPC on non-loopback addresses.", None, Kind.TOP),
    _ours("mirrorline.admin.tokens.file", "path", None,
          "Bearer tokens of Admin API callers and their roles.", None, Kind.TOP),
    _ours("mirrorline.grpc.service.token.file", "path", None,
          "The token services present to each other.", None, Kind.TOP),
)

_BY_NAME: Final[dict[str, Setting]] = {s.name: s for s in SETTINGS}
assert len(_BY_NAME) == len(SETTINGS), "a key is declared twice"
for _s in SETTINGS:
    assert (_s.mm2_default is None or _s.default is None or _s.default == _s.mm2_default
            or _s.why), f"{_s.name}: a changed default needs its reason"


def by_name(name: str) -> Setting | None:
    return _BY_NAME.get(name)


#: Java class names accepted for the filter plug-ins (Mirrorline runs only the default filters).
FILTER_CLASSES: Final[dict[str, frozenset[str]]] = {
    s.name: frozenset({s.mm2_default, s.mm2_default.removeprefix(_MIRROR)})
    for s in SETTINGS if s.name.endswith("filter.class") and s.mm2_default is not None
}

#: Readers of the declared keys (after any level prefix is stripped).
_READERS: Final[dict[str, Callable[[str], object]]] = {
    s.name: s.reader for s in SETTINGS if s.reader is not None}


def reader_for(key: str) -> Callable[[str], object] | None:
    """The reader that validates `key`'s value, by declared name or by name family."""
    reader = _READERS.get(key)
    if reader is not None:
        return reader
    if key == "security.protocol" or key.endswith(".security.protocol"):
        return values.parse_security_protocol
    if key.endswith(".interval.seconds"):
        return values.parse_non_negative
    if key == "replication.factor" or key.endswith(".replication.factor"):
        return values.parse_replication_factor
    return None


# -- the key reference (docs/configuration-keys.md) ----------------------------------------

_SECTIONS: Final = (
    ("Deployment", (Kind.CLUSTER, Kind.TOP), "MM2"),
    ("Flows: MM2's connector keys", (Kind.CONNECTOR,), "MM2"),
    ("Connect-worker keys", (Kind.WORKER,), "MM2"),
    ("Naming aliases and exactly-once", (Kind.NAMING, Kind.EXACTLY_ONCE), "MM2"),
    ("Deprecated aliases", (Kind.DEPRECATED,), "MM2"),
    ("Mirrorline's flow keys", (Kind.MIRRORLINE_FLOW,), "Mirrorline"),
    ("Mirrorline's deployment keys", (Kind.TOP,), "Mirrorline"),
)


def _cell(text: str | None) -> str:
    if text is None:
        return "-"
    if text == "":
        return "(empty)"
    return "`" + text.replace("|", "\\|") + "`"


def key_reference() -> str:
    """The Markdown key reference, generated from `SETTINGS` (`docs/configuration-keys.md`)."""
    lines = [
        "# Configuration keys",
        "",
        "<!-- Generated from services/mirrorline/core/_config_decl.py by "
        "`mirrorline dev docs`; do not edit by hand. -->",
        "",
        "Every key Mirrorline reads from an MM2 dedicated-mode properties file. *Level* says "
        "where a key may be written: `top` (no prefix), `cluster` (`<alias>.`), `target "
        "cluster` (`<target>.`), `flow` (`<source>-><target>.`). A key Mirrorline does not "
        "know is reported as unknown (with \"did you mean ...\" when it is nearly a known "
        "one); a key MM2 or Kafka Connect knows that does nothing here is reported as "
        "having no effect. Client settings (`consumer.*`, `producer.*`, `admin.*`, also "
        "`<alias>.consumer.*` and `<source>-><target>.consumer.*`) and a cluster's `ssl.*` "
        "and `sasl.*` keys are Kafka's client settings and are not listed here.",
        "",
    ]
    for title, kinds, origin in _SECTIONS:
        rows = [s for s in SETTINGS if s.kind in kinds and s.origin == origin]
        if not rows:
            continue
        lines += [f"## {title}", "",
                  "| Key | Level | Type | MM2 default | Mirrorline default | Description |",
                  "|---|---|---|---|---|---|"]
        for s in rows:
            doc = s.doc
            if s.not_acted_on is not None:
                doc += f" **No effect yet:** {s.not_acted_on}"
            lines.append(f"| `{s.name}` | {LEVELS[s.kind]} | {s.type} | "
                         f"{_cell(s.mm2_default)} | {_cell(s.default)} | "
                         f"{doc.replace('|', '/')} |")
        lines.append("")
    changed = [s for s in SETTINGS if s.mm2_default is not None and s.default is not None
               and s.default != s.mm2_default]
    lines += ["## Defaults that differ from MM2", "",
              "MM2's defaults assume clusters of at least three brokers and a mirror that may "
              "run ten minutes behind; on a small cluster they fail quietly (on one broker, "
              "MM2 cannot create its offsets topic and copies nothing). Every other default "
              "is exactly MM2's.", "",
              "| Key | MM2 default | Mirrorline default | Why |", "|---|---|---|---|"]
    lines += [f"| `{s.name}` | {_cell(s.mm2_default)} | {_cell(s.default)} | {s.why} |"
              for s in changed]
    return "\n".join(lines) + "\n"
