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
they are neither translated nor reported.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import ssl
import tempfile
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from aiokafka.codec import has_gzip, has_lz4, has_snappy, has_zstd

from mirrorline.core.errors import ConfigError
from mirrorline.kafka import tls
from mirrorline.kafka._jaas import LoginModule, parse_jaas

__all__ = ["ClientKwargs", "admin_kwargs", "consumer_kwargs", "mark_reported",
           "producer_kwargs"]

#: (aiokafka keyword arguments, Java keys that have no aiokafka equivalent and were ignored).
log = logging.getLogger(__name__)

ClientKwargs = tuple[dict[str, Any], list[str]]

_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_INTEGER: Final = re.compile(r"[+-]?[0-9]+")
_PEM_BLOCK: Final = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.DOTALL)
_COMPRESSION: Final[Mapping[str, tuple[Callable[[], bool], str]]] = {
    "gzip": (has_gzip, "the standard library's gzip"),
    "snappy": (has_snappy, "the Python package 'cramjam'"),
    "lz4": (has_lz4, "the Python package 'cramjam'"),
    "zstd": (has_zstd, "the Python package 'cramjam'"),
}

# Reads one Java value as its aiokafka value; raises ConfigError naming the key.
_Reader = Callable[["_Config", str], Any]


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
    c = _Config(cfg)
    kwargs = _common(c)
    c.map(kwargs, {
        "group.id": ("group_id", _Config.text),
        "group.instance.id": ("group_instance_id", _Config.text),
        "client.rack": ("client_rack", _Config.text),
        "enable.auto.commit": ("enable_auto_commit", _Config.boolean),
        "auto.commit.interval.ms": ("auto_commit_interval_ms", _Config.count),
        "fetch.max.wait.ms": ("fetch_max_wait_ms", _Config.count),
        "fetch.max.bytes": ("fetch_max_bytes", _Config.count),
        "fetch.min.bytes": ("fetch_min_bytes", _Config.count),
        "max.partition.fetch.bytes": ("max_partition_fetch_bytes", _Config.count),
        "max.poll.records": ("max_poll_records", _Config.positive),
        "max.poll.interval.ms": ("max_poll_interval_ms", _Config.count),
        "session.timeout.ms": ("session_timeout_ms", _Config.count),
        "heartbeat.interval.ms": ("heartbeat_interval_ms", _Config.count),
        "check.crcs": ("check_crcs", _Config.boolean),
        "exclude.internal.topics": ("exclude_internal_topics", _Config.boolean),
        "auto.offset.reset": ("auto_offset_reset", _choice("earliest", "latest", "none")),
        "isolation.level": ("isolation_level", _choice("read_uncommitted", "read_committed")),
    })
    return kwargs, c.ignored()


def producer_kwargs(cfg: Mapping[str, str]) -> ClientKwargs:
    """Keyword arguments for `AIOKafkaProducer` from a resolved producer config."""
    c = _Config(cfg)
    kwargs = _common(c)
    c.map(kwargs, {
        "acks": ("acks", _acks),
        "batch.size": ("max_batch_size", _Config.positive),
        "linger.ms": ("linger_ms", _Config.count),
        "compression.type": ("compression_type", _compression),
        "max.request.size": ("max_request_size", _Config.positive),
        "enable.idempotence": ("enable_idempotence", _Config.boolean),
        "transaction.timeout.ms": ("transaction_timeout_ms", _Config.count),
    })
    if kwargs.get("enable_idempotence") and kwargs.get("acks", "all") != "all":
        raise ConfigError("acks", "must be all (or -1) when enable.idempotence is true")
    return kwargs, c.ignored()


def admin_kwargs(cfg: Mapping[str, str]) -> ClientKwargs:
    """Keyword arguments for `AIOKafkaAdminClient` from a resolved admin config."""
    c = _Config(cfg)
    kwargs = _common(c)
    return kwargs, c.ignored()


class _Config:
    """A client config being translated; remembers which keys were consumed."""

    def __init__(self, cfg: Mapping[str, str]) -> None:
        self._values = {key: value.strip() for key, value in cfg.items()}
        self._used: set[str] = set()

    def get(self, key: str) -> str | None:
        self._used.add(key)
        return self._values.get(key)

    def consume(self, prefix: str) -> None:
        """Mark a whole family as handled (inactive settings are not 'ignored')."""
        self._used.update(k for k in self._values if k.startswith(prefix))

    def release(self, key: str) -> None:
        """Report `key` as ignored after all (it was read but cannot take effect)."""
        self._used.discard(key)

    def ignored(self) -> list[str]:
        return sorted(k for k in self._values if k not in self._used)

    def map(self, kwargs: dict[str, Any], table: Mapping[str, tuple[str, _Reader]]) -> None:
        for key, (argument, reader) in table.items():
            if self.get(key) is not None:
                kwargs[argument] = reader(self, key)

    def text(self, key: str) -> str:
        return self._values[key]

    def count(self, key: str) -> int:
        return self._number(key, minimum=0)

    def positive(self, key: str) -> int:
        return self._number(key, minimum=1)

    def _number(self, key: str, *, minimum: int) -> int:
        value = self._values[key]
        if not _INTEGER.fullmatch(value):
            raise ConfigError(key, f"invalid value {value!r}: must be a whole number")
        number = int(value)
        if number < minimum:
            raise ConfigError(key, f"invalid value {value!r}: must be at least {minimum}")
        return number

    def boolean(self, key: str) -> bool:
        value = self._values[key].lower()
        if value not in ("true", "false"):
            raise ConfigError(key, f"invalid value {self._values[key]!r}: must be true or false")
        return value == "true"


def _choice(*allowed: str) -> _Reader:
    def read(c: _Config, key: str) -> str:
        value = c.text(key).lower()
        if value not in allowed:
            raise ConfigError(key, f"invalid value {c.text(key)!r}: must be one of "
                                   + ", ".join(allowed))
        return value
    return read


def _acks(c: _Config, key: str) -> str | int:
    value = c.text(key).lower()
    if value in ("all", "-1"):
        return "all"
    if value in ("0", "1"):
        return int(value)
    raise ConfigError(key, f"invalid value {c.text(key)!r}: must be all, -1, 0 or 1")


def _compression(c: _Config, key: str) -> str | None:
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


def _common(c: _Config) -> dict[str, Any]:
    """Connection, identity and timing settings every aiokafka client takes."""
    kwargs: dict[str, Any] = {"bootstrap_servers": _bootstrap(c)}
    c.map(kwargs, {
        "client.id": ("client_id", _Config.text),
        "request.timeout.ms": ("request_timeout_ms", _Config.count),
        "retry.backoff.ms": ("retry_backoff_ms", _Config.count),
        "metadata.max.age.ms": ("metadata_max_age_ms", _Config.count),
        "connections.max.idle.ms": ("connections_max_idle_ms", _Config.count),
    })
    protocol = (c.get("security.protocol") or "PLAINTEXT").upper()
    if protocol not in _PROTOCOLS:
        raise ConfigError("security.protocol", f"invalid value {protocol!r}: must be one of "
                                               + ", ".join(_PROTOCOLS))
    kwargs["security_protocol"] = protocol
    if protocol in ("SSL", "SASL_SSL"):
        kwargs["ssl_context"] = _ssl_context(c)
    else:
        c.consume("ssl.")
    if protocol.startswith("SASL_"):
        kwargs.update(_sasl(c))
    else:
        c.consume("sasl.")
    return kwargs


def _bootstrap(c: _Config) -> list[str]:
    value = c.get("bootstrap.servers") or ""
    servers = [s.strip() for s in value.split(",") if s.strip()]
    if not servers:
        raise ConfigError("bootstrap.servers", "is missing or empty")
    for server in servers:
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError("bootstrap.servers", f"{server!r} is not host:port")
    return servers


# --- SASL -------------------------------------------------------------------------------------

_SUPPORTED_SASL: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI")


def _sasl(c: _Config) -> dict[str, Any]:
    mechanism = c.get("sasl.mechanism")
    jaas_text = c.get("sasl.jaas.config")
    jaas = parse_jaas(jaas_text) if jaas_text else None
    if mechanism is None:
        # Kafka's default mechanism is GSSAPI; a PLAIN/SCRAM JAAS config then means a
        # forgotten sasl.mechanism, which Java reports only when the login fails.
        if jaas is not None and jaas.mechanism_family != "GSSAPI":
            raise ConfigError("sasl.mechanism", f"is not set, so Kafka's default GSSAPI "
                              f"applies, but sasl.jaas.config uses {jaas.simple_name}; set "
                              "sasl.mechanism (e.g. PLAIN or SCRAM-SHA-512)")
        mechanism = "GSSAPI"
    mechanism = mechanism.upper()
    if mechanism == "OAUTHBEARER":
        raise ConfigError("sasl.mechanism", "OAUTHBEARER is not supported by Mirrorline; use "
                          "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or GSSAPI")
    if mechanism not in _SUPPORTED_SASL:
        raise ConfigError("sasl.mechanism", f"unknown mechanism {mechanism!r}; use "
                          + ", ".join(_SUPPORTED_SASL))
    if mechanism == "GSSAPI":
        return _gssapi(c, jaas)
    return _credentials(mechanism, jaas)


def _credentials(mechanism: str, jaas: LoginModule | None) -> dict[str, Any]:
    family = "PLAIN" if mechanism == "PLAIN" else "SCRAM"
    module = "PlainLoginModule" if family == "PLAIN" else "ScramLoginModule"
    if jaas is None:
        raise ConfigError("sasl.jaas.config", f"is required for SASL/{mechanism}, e.g. "
                          f"org.apache.kafka.common.security.{family.lower()}.{module} required "
                          'username="..." password="...";')
    if jaas.mechanism_family != family:
        raise ConfigError("sasl.jaas.config", f"uses {jaas.simple_name}, but "
                          f"sasl.mechanism={mechanism} needs {module}")
    username, password = jaas.options.get("username"), jaas.options.get("password")
    if not username or password is None:
        raise ConfigError("sasl.jaas.config", f"{module} needs both username=\"...\" and "
                          'password="..." options')
    return {"sasl_mechanism": mechanism, "sasl_plain_username": username,
            "sasl_plain_password": password}


def _gssapi_available() -> bool:
    return importlib.util.find_spec("gssapi") is not None


def _gssapi(c: _Config, jaas: LoginModule | None) -> dict[str, Any]:
    if not _gssapi_available():
        # aiokafka would only fail when it first connects; say it before anything starts.
        raise ConfigError("sasl.mechanism", "GSSAPI (Kerberos) needs the Python package "
                          "'gssapi', which is not installed")
    service = c.get("sasl.kerberos.service.name")
    if not service and jaas is not None:
        service = jaas.options.get("serviceName")
    if not service:
        raise ConfigError("sasl.kerberos.service.name", "is required for SASL/GSSAPI (the "
                          "Kerberos principal name the brokers run as, usually kafka)")
    # Kerberos credentials come from the environment (ticket cache, KRB5_CLIENT_KTNAME); the
    # keyTab/principal options of a JAAS config cannot be applied, so report it as ignored.
    c.release("sasl.jaas.config")
    return {"sasl_mechanism": "GSSAPI", "sasl_kerberos_service_name": service}


# --- SSL --------------------------------------------------------------------------------------


def _ssl_context(c: _Config) -> ssl.SSLContext:
    context = _trust(c)
    _identity(c, context)
    algorithm = c.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None and algorithm.lower() not in ("", "https"):
        raise ConfigError("ssl.endpoint.identification.algorithm",
                          f"invalid value {algorithm!r}: must be https or empty")
    # Java's default is https (verify the broker's host name); empty turns only that off --
    # the certificate chain is still verified.
    context.check_hostname = algorithm is None or algorithm.lower() == "https"
    return context


def _store_type(c: _Config, type_key: str) -> str | None:
    store_type = c.get(type_key)
    if store_type is None:
        return None
    store_type = store_type.upper()
    if store_type not in tls.STORE_TYPES:
        raise ConfigError(type_key, f"invalid value {store_type!r}: must be PEM, PKCS12 or "
                          "JKS")
    return store_type


def _trust(c: _Config) -> ssl.SSLContext:
    location = c.get("ssl.truststore.location")
    inline = c.get("ssl.truststore.certificates")
    store_type = _store_type(c, "ssl.truststore.type")
    if location and inline:
        raise ConfigError("ssl.truststore.certificates",
                          "set either ssl.truststore.location or ssl.truststore.certificates")
    if location and store_type is None:
        _require_pem_file(location, "ssl.truststore.location", "ssl.truststore.type")
    if location and store_type == "JKS":
        raise ConfigError("ssl.truststore.type", tls.jks_hint(location, "ssl.truststore.type"))
    try:
        if location and store_type == "PKCS12":
            return ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=tls.pkcs12_trust_pem(
                location, c.get("ssl.truststore.password")))
        if inline:
            return ssl.create_default_context(ssl.Purpose.SERVER_AUTH,
                                              cadata=_normalise_pem(inline))
        if location:
            return ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=location)
    except (OSError, ssl.SSLError, ValueError) as e:
        key = "ssl.truststore.certificates" if inline else "ssl.truststore.location"
        where = "" if inline else f" from {location}"
        raise ConfigError(key, f"cannot load the trusted certificates{where}: "
                               f"{_reason(e)}") from None
    return ssl.create_default_context(ssl.Purpose.SERVER_AUTH)  # the system's CAs


def _identity(c: _Config, context: ssl.SSLContext) -> None:
    """The client certificate (mutual TLS), from a PEM file or inline PEM."""
    location = c.get("ssl.keystore.location")
    chain = c.get("ssl.keystore.certificate.chain")
    key = c.get("ssl.keystore.key")
    store_type = _store_type(c, "ssl.keystore.type")
    password = c.get("ssl.key.password")
    if location and (chain or key):
        raise ConfigError("ssl.keystore.location", "set either ssl.keystore.location or "
                          "ssl.keystore.certificate.chain + ssl.keystore.key, not both")
    if bool(chain) != bool(key):
        raise ConfigError("ssl.keystore.key" if chain else "ssl.keystore.certificate.chain",
                          "ssl.keystore.certificate.chain and ssl.keystore.key go together")
    # Never let OpenSSL prompt on the terminal for a missing key password.
    secret: str = password if password is not None else ""
    if location and store_type == "JKS":
        raise ConfigError("ssl.keystore.type", tls.jks_hint(location, "ssl.keystore.type"))
    if location and store_type == "PKCS12":
        tls.load_pem_chain(context, tls.pkcs12_identity_pem(
            location, c.get("ssl.keystore.password")), "ssl.keystore.location")
    elif location:
        if store_type is None:
            _require_pem_file(location, "ssl.keystore.location", "ssl.keystore.type")
        _load_chain(context, location, secret, "ssl.keystore.location", f" from {location}")
    elif chain and key:
        pem = _inline_pem(key, "ssl.keystore.key") + _inline_pem(
            chain, "ssl.keystore.certificate.chain")
        # The standard library loads certificates and keys only from files: write a private
        # temporary file (mode 0600) and remove it straight away.
        fd, path = tempfile.mkstemp(prefix="mirrorline-", suffix=".pem")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(pem)
            _load_chain(context, path, secret, "ssl.keystore.key", "")
        finally:
            os.unlink(path)


def _inline_pem(text: str, key: str) -> str:
    try:
        return _normalise_pem(text)
    except ValueError as e:
        raise ConfigError(key, f"is not PEM: {e}") from None


def _load_chain(context: ssl.SSLContext, path: str, password: str, key: str,
                where: str) -> None:
    try:
        context.load_cert_chain(path, password=password)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(key, f"cannot load the client certificate and key{where}: "
                               f"{_reason(e)} (if the key is encrypted, check "
                               "ssl.key.password)") from None


def _require_pem_file(location: str, key: str, type_key: str) -> None:
    """Kafka defaults store types to JKS; accept a type-less store only if it is PEM."""
    try:
        with open(location, "rb") as handle:
            head = handle.read(65536)
    except OSError as e:
        raise ConfigError(key, f"cannot read {location}: {_reason(e)}") from None
    if b"-----BEGIN " not in head:
        raise ConfigError(type_key, f"is not set, so Kafka's default JKS applies to "
                          f"{location}, which is not PEM: set {type_key} = PKCS12 for a "
                          "PKCS12 store; for a JKS store, " + tls.jks_hint(location, type_key))


def _normalise_pem(text: str) -> str:
    """Re-wrap PEM blocks that lost their line breaks (e.g. through `\\` continuations)."""
    blocks = []
    for label, body in _PEM_BLOCK.findall(text):
        data = "".join(body.split())
        lines = [data[i:i + 64] for i in range(0, len(data), 64)]
        blocks.append("\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----"]))
    if not blocks:
        raise ValueError("no PEM block (-----BEGIN ...-----) found")
    return "\n".join(blocks) + "\n"


def _reason(error: Exception) -> str:
    if isinstance(error, ssl.SSLError):
        return error.reason or "not a valid PEM certificate or key"
    if isinstance(error, OSError):
        return error.strerror or str(error)
    return str(error)
