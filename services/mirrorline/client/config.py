"""MM2's `MirrorClientConfig`: a property map -> a replication policy and client configs.

Callers of `RemoteClusterUtils` hand MM2 one flat map of Java client properties (often the
very file their applications already use), so we accept the same map with the same rules
rather than inventing a Python-shaped configuration:

* the policy comes from `replication.policy.class` / `.separator` /
  `.internal.topic.separator.enabled`, and an identity policy also reads
  `source.cluster.alias` (Java hands the policy *all* properties, so it sees that key too);
* the admin and consumer configs keep only the connection keys (`bootstrap.servers`,
  `security.protocol`, `ssl.*`, `sasl.*`), with `admin.`/`consumer.`-prefixed values
  overriding the unprefixed ones.  Every other key is dropped silently, as MM2 drops it:
  such maps are commonly shared with producers and consumers full of tuning we must not
  apply to a read-only metadata client.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from mirrorline.core.errors import ConfigError
from mirrorline.core.policy import (
    DefaultReplicationPolicy,
    IdentityReplicationPolicy,
    ReplicationPolicy,
    policy_kind,
)

__all__ = ["MirrorClientConfig", "client_properties", "policy_from_properties"]

POLICY_CLASS: Final = "replication.policy.class"
SEPARATOR: Final = "replication.policy.separator"
INTERNAL_SEPARATOR_ENABLED: Final = "replication.policy.internal.topic.separator.enabled"
SOURCE_CLUSTER_ALIAS: Final = "source.cluster.alias"

_CONNECTION_KEYS: Final = frozenset({"bootstrap.servers", "security.protocol"})
_CONNECTION_PREFIXES: Final = ("ssl.", "sasl.")


def _is_connection_key(key: str) -> bool:
    return key in _CONNECTION_KEYS or key.startswith(_CONNECTION_PREFIXES)


def client_properties(properties: Mapping[str, str], prefix: str) -> dict[str, str]:
    """Connection keys for one client role (`prefix` is ``"admin."`` or ``"consumer."``).

    Mirrors Java's ``valuesWithPrefixOverride(prefix)`` followed by keeping only the client
    connection keys.
    """
    result = {k: v for k, v in properties.items() if _is_connection_key(k)}
    for key, value in properties.items():
        if key.startswith(prefix) and _is_connection_key(key[len(prefix):]):
            result[key[len(prefix):]] = value
    return result


def _flag(properties: Mapping[str, str], key: str, default: bool) -> bool:
    """A ConfigDef BOOLEAN: `true`/`false` in any case, blanks trimmed; anything else fails."""
    raw = properties.get(key)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(key, f"invalid value {raw!r}: must be true or false")
    return value == "true"


def policy_from_properties(properties: Mapping[str, str]) -> ReplicationPolicy:
    """The policy MM2 would instantiate from these properties.

    Only the two built-in policies exist in Python; any other class name is a ConfigError
    rather than a silent fallback, because a wrong policy misreads every topic name.
    """
    class_name = properties.get(POLICY_CLASS, "DefaultReplicationPolicy")
    kind = policy_kind(class_name)
    if kind is None:
        raise ConfigError(POLICY_CLASS, f"unknown replication policy {class_name.strip()!r}; "
                          "use org.apache.kafka.connect.mirror.DefaultReplicationPolicy or "
                          "org.apache.kafka.connect.mirror.IdentityReplicationPolicy")
    raw_separator = properties.get(SEPARATOR)
    # The separator (and with it the internal-separator flag) only counts when present.
    separator = None if raw_separator is None else raw_separator.strip()
    internal = _flag(properties, INTERNAL_SEPARATOR_ENABLED, True)
    if kind == "identity":
        alias = properties.get(SOURCE_CLUSTER_ALIAS)
        return IdentityReplicationPolicy(
            separator, internal,
            source_cluster_alias=None if alias is None else alias.strip() or None)
    return DefaultReplicationPolicy(separator, internal)


@dataclass(frozen=True)
class MirrorClientConfig:
    """Everything a `MirrorClient` needs, parsed and validated up front.

    Parsing happens in the constructor of the client, not at `start()`, so a bad property
    fails before any connection is attempted.
    """

    policy: ReplicationPolicy
    admin: Mapping[str, str]
    consumer: Mapping[str, str]

    @classmethod
    def parse(cls, properties: Mapping[str, str]) -> MirrorClientConfig:
        return cls(
            policy=policy_from_properties(properties),
            admin=client_properties(properties, "admin."),
            consumer=client_properties(properties, "consumer."),
        )
