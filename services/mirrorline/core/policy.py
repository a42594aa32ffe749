"""MM2's ReplicationPolicy: how remote topics are named and how a name is read back.

The policy is the only thing that ties a topic name on one cluster to its name on another, so
every component (replication, checkpoints, heartbeats, topology discovery) must agree with Java
MM2 on it to the character.  That is why the parsing below copies Java quirks deliberately:

* `DefaultReplicationPolicy.topic_source` emulates Java ``String.split`` (trailing empty pieces
  dropped, a leading empty piece kept), so ``".b"`` has the *empty* alias ``""`` as its source;
* a custom separator only takes effect when it was configured, and only then is the
  "internal topic separator" flag honoured (upgrade compatibility with MM2 <= 3.0);
* the identity policy defers to the default policy for any name ending in ``heartbeats`` so
  that heartbeats remain renamed and therefore cycle-safe.

Cluster aliases that contain the separator make names ambiguous; MM2 does not reject them and
neither do we (``us.west.orders`` parses as source ``us``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, Literal

from mirrorline.core.errors import ConfigError
from mirrorline.core.settings import PolicySettings

__all__ = [
    "DEFAULT_SEPARATOR",
    "FAUST_LEADER_SUFFIX",
    "POLICY_KINDS",
    "DefaultReplicationPolicy",
    "IdentityReplicationPolicy",
    "PolicyKind",
    "ReplicationPolicy",
    "checkpoint_topic_name",
    "is_cycle",
    "make_policy",
    "policy_kind",
]

PolicyKind = Literal["default", "identity"]

DEFAULT_SEPARATOR: Final = "."
#: Faust's leader-election topic: `<app id>-__assignor-__leader`.
FAUST_LEADER_SUFFIX: Final = "-__assignor-__leader"
_HEARTBEATS: Final = "heartbeats"
#: Mirrorline's canary topic (no MM2 counterpart); named and renamed like heartbeats.
_CANARY: Final = "mirrorline-canary"

_JAVA_PACKAGE: Final = "org.apache.kafka.connect.mirror."

#: Every spelling of `replication.policy.class` we understand, keyed in lower case.
POLICY_KINDS: Final[Mapping[str, PolicyKind]] = MappingProxyType({
    f"{_JAVA_PACKAGE}DefaultReplicationPolicy".lower(): "default",
    f"{_JAVA_PACKAGE}IdentityReplicationPolicy".lower(): "identity",
    "defaultreplicationpolicy": "default",
    "identityreplicationpolicy": "identity",
    "default": "default",
    "identity": "identity",
})


def policy_kind(name: str) -> PolicyKind | None:
    """Map a `replication.policy.class` value to a policy kind, or None when unknown.

    Lookup ignores case and surrounding blanks: Java class names are case-sensitive, but a
    value that differs only in case can only mean one of our two policies.
    """
    return POLICY_KINDS.get(name.strip().lower())


class ReplicationPolicy(ABC):
    """Naming contract shared by all policies (MM2's ReplicationPolicy interface).

    Subclasses supply the three name-parsing primitives; everything else is derived from them
    with the same default bodies MM2's interface has, so a custom policy behaves like one
    plugged into Java MM2.
    """

    @property
    def separator(self) -> str:
        """Separator between alias and topic in remote names."""
        return DEFAULT_SEPARATOR

    @abstractmethod
    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        """Name of `topic` once copied from the cluster `source_alias`."""

    @abstractmethod
    def topic_source(self, topic: str) -> str | None:
        """Alias of the cluster `topic` was directly copied from; None for a local topic."""

    @abstractmethod
    def upstream_topic(self, topic: str) -> str | None:
        """Name of `topic` on its immediate upstream cluster; None for a local topic."""

    def original_topic(self, topic: str) -> str:
        """Name on the very first cluster, after any number of hops.

        Stops when the upstream name is None *or unchanged*: identity-style policies map a
        name to itself and would otherwise loop forever.
        """
        while True:
            upstream = self.upstream_topic(topic)
            if upstream is None or upstream == topic:
                return topic
            topic = upstream

    def heartbeats_topic(self) -> str:
        return _HEARTBEATS

    def canary_topic(self) -> str:
        return _CANARY

    def is_canary_topic(self, topic: str) -> bool:
        return self.original_topic(topic) == self.canary_topic()

    def offset_syncs_topic(self, alias: str) -> str:
        return f"mm2-offset-syncs.{alias}.internal"

    def checkpoints_topic(self, alias: str) -> str:
        return f"{alias}.checkpoints.internal"

    def is_heartbeats_topic(self, topic: str) -> bool:
        return self.original_topic(topic) == self.heartbeats_topic()

    def is_checkpoints_topic(self, topic: str) -> bool:
        return topic.endswith(".checkpoints.internal")

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return topic.endswith(".internal")

    def is_internal_topic(self, topic: str) -> bool:
        """Topics that must never be replicated: MM2's own, Kafka's and Connect's (the
        rule of MM2's DefaultReplicationPolicy.isInternalTopic before KIP-1074), and the
        leader-election topic of a faust app (`<app>-__assignor-__leader`, which the
        heartbeat service's own faust apps create on each target cluster too): a copy of
        it on another cluster would only confuse a faust app there.

        Faust's `<app>-<table>-changelog` and `-repartition` topics are not internal here:
        Kafka Streams names its topics the same way, MM2 mirrors them (KIP-1074 went
        further and mirrors user topics that merely look internal), and mirroring a
        state store's changelog is a legitimate disaster-recovery choice. `topics.exclude`
        leaves them out (`.*-changelog, .*-repartition`). The heartbeat service's own
        changelogs end in `.internal`."""
        return (
            self.is_mm2_internal_topic(topic)
            or topic.startswith(("__", "."))
            or topic.endswith(("-internal", ".internal", FAUST_LEADER_SUFFIX))
        )


def _java_split(text: str, sep: str) -> list[str]:
    """``text.split(Pattern.quote(sep))`` as Java computes it (limit 0).

    An empty separator matches between every two characters, so Java yields one piece per
    character (`"orders"` -> `o, r, d, e, r, s`): every name of two or more characters then
    reads as remote, from a one-character "cluster".
    """
    parts = list(text) if sep == "" else text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    # Java returns [""] for an empty input (no match found); Python agrees, but the loop
    # above emptied it.  Either way fewer than two pieces means "not remote".
    return parts


class DefaultReplicationPolicy(ReplicationPolicy):
    """``<source><sep><topic>`` naming, MM2's DefaultReplicationPolicy.

    `separator=None` means `replication.policy.separator` was not configured: "." is used
    everywhere and `internal_topic_separator_enabled` is ignored, exactly as MM2 only reads
    the flag when the separator key is present.
    """

    def __init__(self, separator: str | None = None,
                 internal_topic_separator_enabled: bool = True) -> None:
        if separator is None:
            self._sep = DEFAULT_SEPARATOR
            self._isep = DEFAULT_SEPARATOR
        else:
            # An empty separator is legal in MM2: names are `<alias><topic>`, and reading a
            # name back splits it into single characters (see `_java_split`).
            self._sep = separator
            self._isep = separator if internal_topic_separator_enabled else DEFAULT_SEPARATOR

    @property
    def separator(self) -> str:
        return self._sep

    @property
    def _internal_suffix(self) -> str:
        return f"{self._isep}internal"

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{source_alias}{self._sep}{topic}"

    def topic_source(self, topic: str) -> str | None:
        parts = _java_split(topic, self._sep)
        if len(parts) < 2:
            return None
        return parts[0]

    def upstream_topic(self, topic: str) -> str | None:
        source = self.topic_source(topic)
        if source is None:
            return None
        return topic[len(source) + len(self._sep):]

    def offset_syncs_topic(self, alias: str) -> str:
        return f"mm2-offset-syncs{self._isep}{alias}{self._internal_suffix}"

    def checkpoints_topic(self, alias: str) -> str:
        return f"{alias}{self._isep}checkpoints{self._internal_suffix}"

    def is_checkpoints_topic(self, topic: str) -> bool:
        # Needs the leading separator: a bare "checkpoints.internal" names no source cluster.
        return topic.endswith(f"{self._isep}checkpoints{self._internal_suffix}")

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return topic.endswith(self._internal_suffix)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(separator={self._sep!r}, internal_separator={self._isep!r})"


class IdentityReplicationPolicy(DefaultReplicationPolicy):
    """Keeps topic names unchanged, except heartbeats (MM2's IdentityReplicationPolicy).

    Without renaming, a data topic carries no trace of where it came from, so `topic_source`
    can only answer with the configured source alias (None when none was given), and cycles
    between data topics cannot be detected.  Heartbeat-like names (anything *ending* in
    ``heartbeats``) keep the default renaming so heartbeats stay cycle-safe and topology
    discovery keeps working.
    """

    def __init__(self, separator: str | None = None,
                 internal_topic_separator_enabled: bool = True, *,
                 source_cluster_alias: str | None = None) -> None:
        super().__init__(separator, internal_topic_separator_enabled)
        self._source_alias = source_cluster_alias

    @property
    def source_cluster_alias(self) -> str | None:
        return self._source_alias

    def _looks_like_heartbeat(self, topic: str) -> bool:
        # The canary is renamed too: kept as is, the source's canary would land in the
        # target's own canary topic.
        return topic.endswith((self.heartbeats_topic(), self.canary_topic()))

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        if self._looks_like_heartbeat(topic):
            return super().format_remote_topic(source_alias, topic)
        return topic

    def topic_source(self, topic: str) -> str | None:
        if self._looks_like_heartbeat(topic):
            return super().topic_source(topic)
        return self._source_alias

    def upstream_topic(self, topic: str) -> str | None:
        if self._looks_like_heartbeat(topic):
            return super().upstream_topic(topic)
        return topic

    def original_topic(self, topic: str) -> str:
        if self._looks_like_heartbeat(topic):
            return super().original_topic(topic)
        return topic

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(separator={self.separator!r}, "
                f"source_cluster_alias={self._source_alias!r})")


def make_policy(settings: PolicySettings, source_alias: str | None = None) -> ReplicationPolicy:
    """Build the policy a flow uses.

    `source_alias` plays the role of MM2's `source.cluster.alias`, which a connector hands to
    its policy automatically; only the identity policy reads it.
    """
    if settings.kind == "identity":
        return IdentityReplicationPolicy(
            settings.separator, settings.internal_topic_separator_enabled,
            source_cluster_alias=source_alias,
        )
    if settings.kind == "default":
        return DefaultReplicationPolicy(settings.separator,
                                        settings.internal_topic_separator_enabled)
    raise ConfigError("replication.policy.class", f"unknown replication policy {settings.kind!r}")


def is_cycle(policy: ReplicationPolicy, topic: str, target_alias: str) -> bool:
    """True when `topic` already passed through `target_alias` (MirrorSourceConnector.isCycle).

    Walks the chain of upstream names; any hop whose source is the target means the records
    would be copied back to where they came from.  The walk ends without a cycle when a name
    is local, or when the upstream name is None or unchanged (identity-style policies, which
    cannot see cycles at all).
    """
    while True:
        source = policy.topic_source(topic)
        if source is None:
            return False
        if source == target_alias:
            return True
        upstream = policy.upstream_topic(topic)
        if upstream is None or upstream == topic:
            return False
        topic = upstream


def checkpoint_topic_name(policy: ReplicationPolicy, topic: str, *,
                          source_alias: str, target_alias: str) -> str:
    """Downstream name under which a group's offset for upstream `topic` is checkpointed.

    A topic that itself came from the target maps back to its *original* name there (so a
    failback lands on the topic the group first consumed); any other topic maps to its remote
    name on the target.  This is MirrorCheckpointTask's `renameTopicPartition`; note it uses
    `original_topic`, not one `upstream_topic` step.
    """
    if policy.topic_source(topic) == target_alias:
        return policy.original_topic(topic)
    return policy.format_remote_topic(source_alias, topic)
