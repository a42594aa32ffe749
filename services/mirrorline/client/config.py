"""MM2's `MirrorClientConfig`: a property map -> a replication policy and client configs.

Callers of `RemoteClusterUtils` hand MM2 one flat map of Java client properties (often the
very file their applications already use), so we accept the same map with the same rules
rather than inventing a Python-shaped configuration:

* the policy comes from `replication.policy.class` / `.separator` /
  `.internal.topic.separator.enabled`, and an identity policy also reads
  `source.cluster.alias` (Java hands the policy *all* properties, so it sees that key too);
  `mirrorline.core.config.policy_from_properties` reads them with the loader's own checks;
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

from mirrorline.core.config import policy_from_properties
from mirrorline.core.policy import ReplicationPolicy

__all__ = ["MirrorClientConfig", "client_properties", "policy_from_properties"]

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
