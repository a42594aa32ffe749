"""Every client setting of a deployment, checked before any service connects anywhere.

A bad `sasl.jaas.config`, an unreadable CA file or an impossible number is a configuration
error: no retry can fix it. Found at connect time inside a service, it became a
traceback and an exit that `mirrorline run` answered by restarting the service forever
(or a standalone replicator retrying the flow forever). Translating every cluster's and
every flow's client settings up front turns each such problem into one `ConfigError`
naming the prefixed key, so every command exits with status 2 at once.
"""

from __future__ import annotations

from collections.abc import Mapping

from mirrorline.core.errors import ConfigError
from mirrorline.core.settings import MirrorSettings
from mirrorline.kafka.clients import admin_kwargs, consumer_kwargs, producer_kwargs

_TRANSLATORS = {"admin": admin_kwargs, "consumer": consumer_kwargs,
                "producer": producer_kwargs}


def check_client_settings(settings: MirrorSettings) -> None:
    """Raise ConfigError for the first client setting no client could be built from."""
    for alias, cluster in settings.clusters.items():
        for role, translate in _TRANSLATORS.items():
            _check(settings, alias, role, cluster.connection, translate)
    for flow in settings.flows.values():
        c = flow.clients
        for alias, role, cfg in (
                (flow.source, "consumer", c.source_consumer),
                (flow.source, "producer", c.source_producer),
                (flow.source, "admin", c.source_admin),
                (flow.target, "consumer", c.target_consumer),
                (flow.target, "producer", c.target_producer),
                (flow.target, "admin", c.target_admin)):
            _check(settings, alias, role, cfg, _TRANSLATORS[role])


def _check(settings: MirrorSettings, alias: str, role: str, cfg: Mapping[str, str],
           translate: object) -> None:
    try:
        translate(cfg)  # type: ignore[operator]
    except ConfigError as exc:
        key = f"{alias}.{exc.key}" if exc.key and not exc.key.startswith(f"{alias}.") \
            else exc.key
        raise ConfigError(key, f"{exc.message} (needed by every {role} of cluster "
                               f"{alias!r})", source=settings.source_path) from None
