"""Kafka client configs (Java property names) -> aiokafka constructor keyword arguments.

Operators write Java client settings (`<alias>.consumer.max.poll.records`, `sasl.jaas.config`,
`ssl.truststore.location`, ...) because that is what MM2 reads. aiokafka takes differently
named Python arguments, has no equivalent for some Java settings and cannot read Java key
stores, so this is the one place that translates. Three rules:

* anything with an equivalent is translated and checked (a bad value is a `ConfigError`
  naming the key, never an aiokafka exception at connect time);
* anything without an equivalent is returned by name, so the caller can warn once instead of
  pretending it took effect;
* secret values (passwords, JAAS configs, private keys) never reach a message; they only go
  to aiokafka or OpenSSL.

`ssl.*` / `sasl.*` settings of a protocol that does not use them are inactive, as in Java:
they are neither translated nor reported. The settings every client shares and those of
consumers, producers and admin clients are translated here; SASL in `_client_sasl`, TLS in
`_client_tls`, all reading through one `_client_config.ClientConfig`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from aiokafka.codec import has_gzip, has_lz4, has_snappy, has_zstd

from mirrorline.core.errors import ConfigError
from mirrorline.kafka._client_config import ClientConfig, Reader
from mirrorline.kafka._client_sasl import sasl_kwargs
from mirrorline.kafka._client_tls import ssl_context
from mirrorline.kafka.pipelining import KEY as MAX_IN_FLIGHT
from mirrorline.kafka.pipelining import max_in_flight

__all__ = ["ClientKwargs", "admin_kwargs", "consumer_kwargs", "mark_reported",
           "producer_kwargs"]

log = logging.getLogger(__name__)

#: (aiokafka keyword arguments, Java keys that have no aiokafka equivalent and were ignored).
ClientKwargs = tuple[dict[str, Any], list[str]]

_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_COMPRESSION: Final[Mapping[str, tuple[Callable[[], bool], str]]] = {
    "gzip": (has_gzip, "the standard library's gzip"),
    "snappy": (has_snappy, "the Python package 'cramjam'"),
    "lz4": (has_lz4, "the Python package 'cramjam'"),
    "zstd": (has_zstd, "the Python package 'cramjam'"),
}

_warned: set[str] = set()


def mark_reported(keys: Iterable[str]) -> None:
    """These ignored settings were already reported (by the configuration check), so
    `build` does not log them again."""
    _warned.update(keys)


def build(translate: Callable[[Mapping[str, str]], ClientKwargs], cfg: Mapping[str, str],
          client_id: str) -> dict[str, Any]:
    """aiokafka kwargs for `cfg` with a default client id; settings aiokafka has no
    equivalent for are logged once per process (by name; values never appear)."""
    kwargs, ignored = translate(cfg)
    fresh = sorted(set(ignored) - _warned)
    if fresh:
        _warned.update(fresh)
        log.warning("client settings with no effect (no aiokafka equivalent): %s",
                    ", ".join(fresh))
    kwargs = dict(kwargs)
    kwargs.setdefault("client_id", client_id)
    return kwargs


def consumer_kwargs(cfg: Mapping[str, str]) -> ClientKwargs:
    """Keyword arguments for `AIOKafkaConsumer` from a resolved consumer config."""
    c = ClientConfig(cfg)
    kwargs = _common(c)
    c.map(kwargs, {
        "group.id": ("group_id", ClientConfig.text),
        "group.instance.id": ("group_instance_id", ClientConfig.text),
        "client.rack": ("client_rack", ClientConfig.text),
        "enable.auto.commit": ("enable_auto_commit", ClientConfig.boolean),
        "auto.commit.interval.ms": ("auto_commit_interval_ms", ClientConfig.count),
        "fetch.max.wait.ms": ("fetch_max_wait_ms", ClientConfig.count),
        "fetch.max.bytes": ("fetch_max_bytes", ClientConfig.count),
        "fetch.min.bytes": ("fetch_min_bytes", ClientConfig.count),
        "max.partition.fetch.bytes": ("max_partition_fetch_bytes", ClientConfig.count),
        "max.poll.records": ("max_poll_records", ClientConfig.positive),
        "max.poll.interval.ms": ("max_poll_interval_ms", ClientConfig.count),
        "session.timeout.ms": ("session_timeout_ms", ClientConfig.count),
        "heartbeat.interval.ms": ("heartbeat_interval_ms", ClientConfig.count),
        "check.crcs": ("check_crcs", ClientConfig.boolean),
        "exclude.internal.topics": ("exclude_internal_topics", ClientConfig.boolean),
        "auto.offset.reset": ("auto_offset_reset", _choice("earliest", "latest", "none")),
        "isolation.level": ("isolation_level", _choice("read_uncommitted", "read_committed")),
    })
    return kwargs, c.ignored()


def producer_kwargs(cfg: Mapping[str, str]) -> ClientKwargs:
    """Keyword arguments for `AIOKafkaProducer` from a resolved producer config."""
    c = ClientConfig(cfg)
    kwargs = _common(c)
    c.map(kwargs, {
        "acks": ("acks", _acks),
        "batch.size": ("max_batch_size", ClientConfig.positive),
        "linger.ms": ("linger_ms", ClientConfig.count),
        "compression.type": ("compression_type", _compression),
        "max.request.size": ("max_request_size", ClientConfig.positive),
        "enable.idempotence": ("enable_idempotence", ClientConfig.boolean),
        "transaction.timeout.ms": ("transaction_timeout_ms", ClientConfig.count),
    })
    if kwargs.get("enable_idempotence") and kwargs.get("acks", "all") != "all":
        raise ConfigError("acks", "must be all (or -1) when enable.idempotence is true")
    if c.get(MAX_IN_FLIGHT) is not None:  # checked here; the flow's producer applies it
        max_in_flight({MAX_IN_FLIGHT: c.text(MAX_IN_FLIGHT)},
                      idempotent=kwargs.get("enable_idempotence",
                                            kwargs.get("acks", "all") == "all"))
    return kwargs, c.ignored()


def admin_kwargs(cfg: Mapping[str, str]) -> ClientKwargs:
    """Keyword arguments for `AIOKafkaAdminClient` from a resolved admin config."""
    c = ClientConfig(cfg)
    kwargs = _common(c)
    return kwargs, c.ignored()


def _choice(*allowed: str) -> Reader:
    def read(c: ClientConfig, key: str) -> str:
        value = c.text(key).lower()
        if value not in allowed:
            raise ConfigError(key, f"invalid value {c.text(key)!r}: must be one of "
                                   + ", ".join(allowed))
        return value
    return read


def _acks(c: ClientConfig, key: str) -> str | int:
    value = c.text(key).lower()
    if value in ("all", "-1"):
        return "all"
    if value in ("0", "1"):
        return int(value)
    raise ConfigError(key, f"invalid value {c.text(key)!r}: must be all, -1, 0 or 1")


def _compression(c: ClientConfig, key: str) -> str | None:
    value = c.text(key).lower()
    if value == "none":
        return None
    if value not in _COMPRESSION:
        raise ConfigError(key, f"invalid value {c.text(key)!r}: must be one of none, "
                               + ", ".join(_COMPRESSION))
    available, needs = _COMPRESSION[value]
    if not available():
        raise ConfigError(key, f"{value} compression needs {needs}, which is not installed")
    return value


def _common(c: ClientConfig) -> dict[str, Any]:
    """Connection, identity and timing settings every aiokafka client takes."""
    kwargs: dict[str, Any] = {"bootstrap_servers": _bootstrap(c)}
    c.map(kwargs, {
        "client.id": ("client_id", ClientConfig.text),
        "request.timeout.ms": ("request_timeout_ms", ClientConfig.count),
        "retry.backoff.ms": ("retry_backoff_ms", ClientConfig.count),
        "metadata.max.age.ms": ("metadata_max_age_ms", ClientConfig.count),
        "connections.max.idle.ms": ("connections_max_idle_ms", ClientConfig.count),
    })
    protocol = (c.get("security.protocol") or "PLAINTEXT").upper()
    if protocol not in _PROTOCOLS:
        raise ConfigError("security.protocol", f"invalid value {protocol!r}: must be one of "
                                               + ", ".join(_PROTOCOLS))
    kwargs["security_protocol"] = protocol
    if protocol in ("SSL", "SASL_SSL"):
        kwargs["ssl_context"] = ssl_context(c)
    else:
        c.consume("ssl.")
    if protocol.startswith("SASL_"):
        kwargs.update(sasl_kwargs(c))
    else:
        c.consume("sasl.")
    return kwargs


def _bootstrap(c: ClientConfig) -> list[str]:
    value = c.get("bootstrap.servers") or ""
    servers = [s.strip() for s in value.split(",") if s.strip()]
    if not servers:
        raise ConfigError("bootstrap.servers", "is missing or empty")
    for server in servers:
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError("bootstrap.servers", f"{server!r} is not host:port")
    return servers
