"""Checking every client setting of a deployment before any service starts.

Client settings -- TLS stores above all -- are only translated when a service creates a
client, which used to mean a traceback from a child process and a restart loop for a wrong
truststore path. `check_clients` builds every client config of every enabled flow (and each
cluster's own admin config) once, up front, the same way the services will, loading every
trust and key store. A problem becomes a `ConfigError` naming the key as written in the file
(`us-east.ssl.truststore.location`) and its line; a setting aiokafka has no equivalent for
becomes a warning, reported here once instead of by every service. No connection is opened.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from mirrorline.core.errors import ConfigError
from mirrorline.core.settings import ConfigWarning, MirrorSettings
from mirrorline.kafka.clients import (
    ClientKwargs,
    admin_kwargs,
    consumer_kwargs,
    mark_reported,
    producer_kwargs,
)

__all__ = ["check_clients"]

_Translate = Callable[[Mapping[str, str]], ClientKwargs]


def check_clients(settings: MirrorSettings) -> list[ConfigWarning]:
    """Raise `ConfigError` (prefixed key, line) for the first client setting that fails;
    return a warning for each setting without effect (and mark it reported, so the clients
    built later in this process do not log it again)."""
    ignored: dict[str, ConfigWarning] = {}
    for alias, cluster in settings.clusters.items():
        _check(settings, admin_kwargs, cluster.connection, (f"{alias}.", ""), ignored)
    for flow in settings.enabled_flows():
        c = flow.clients
        src, tgt, pair = f"{flow.source}.", f"{flow.target}.", f"{flow.name}."
        for translate, config, role, alias in (
                (consumer_kwargs, c.source_consumer, "consumer.", src),
                (producer_kwargs, c.source_producer, "producer.", src),
                (admin_kwargs, c.source_admin, "admin.", src),
                (consumer_kwargs, c.target_consumer, "consumer.", tgt),
                (producer_kwargs, c.target_producer, "producer.", tgt),
                (admin_kwargs, c.target_admin, "admin.", tgt)):
            _check(settings, translate, config,
                   (pair + role, alias + role, role, alias, ""), ignored)
    return sorted(ignored.values(), key=lambda w: (w.line or 0, w.key))


def _check(settings: MirrorSettings, translate: _Translate, config: Mapping[str, str],
           prefixes: tuple[str, ...], ignored: dict[str, ConfigWarning]) -> None:
    try:
        _, unused = translate(config)
    except ConfigError as e:
        key, line = _where(settings, e.key, prefixes)
        raise ConfigError(key, e.message, line=line, source=settings.source_path) from None
    mark_reported(unused)
    for name in unused:
        key, line = _where(settings, name, prefixes)
        if key is not None and key not in ignored:
            ignored[key] = ConfigWarning(key, "a client setting with no effect (the Python "
                                         "Kafka client has no equivalent)", line)


def _where(settings: MirrorSettings, key: str | None,
           prefixes: tuple[str, ...]) -> tuple[str | None, int | None]:
    """The key as written in the file and its line; for a key the file does not set (a
    store type left at Kafka's JKS default), the prefix and line of its sibling location."""
    if key is None:
        return None, None
    for prefix in prefixes:
        if prefix + key in settings.raw:
            return prefix + key, settings.lines.get(prefix + key)
    sibling = key.rsplit(".", 1)[0] + ".location"
    for prefix in prefixes:
        if prefix + sibling in settings.raw:
            return prefix + key, settings.lines.get(prefix + sibling)
    return prefixes[-2] + key if len(prefixes) > 1 else key, None
