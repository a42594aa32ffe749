"""Kafka client settings for librdkafka (confluent-kafka), from the same Java properties.

The Spark executor's source and sink run inside Spark's Python workers, where librdkafka
is the fast client. Their settings come from the flow's `<alias>.consumer.*` /
`<alias>.producer.*` properties, validated by the same translation the aiokafka clients
use (`mirrorline.kafka.clients`), so a setting is accepted or refused the same way on
both paths. Only what librdkafka needs to connect is carried over: bootstrap servers,
the security protocol, SASL credentials and PEM trust/identity files.
"""

from __future__ import annotations

from collections.abc import Mapping

from mirrorline.kafka.clients import consumer_kwargs, producer_kwargs

__all__ = ["rdkafka_consumer_config", "rdkafka_producer_config"]

_PEM_KEYS = {
    "ssl.truststore.location": "ssl.ca.location",
    "ssl.keystore.location": "ssl.certificate.location",
    "ssl.key.password": "ssl.key.password",
}


def rdkafka_producer_config(java: Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings of a producer to the cluster `java` describes: how to reach it,
    and the codec of what it writes (`compression.type`, the same names in both clients).

    Raises ConfigError (naming the key) for anything the aiokafka translation refuses.
    """
    kwargs, _ = producer_kwargs(java)  # validates (SASL, SSL files, protocol, codec) or raises
    out = _connection(java, kwargs)
    out["compression.type"] = str(kwargs.get("compression_type") or "none")
    return out


def _connection(java: Mapping[str, str], kwargs: Mapping[str, object]) -> dict[str, str]:
    """The librdkafka settings of `java`, from its validated aiokafka translation."""
    servers = kwargs.get("bootstrap_servers")
    out = {"bootstrap.servers": ",".join(servers) if isinstance(servers, list)
           else str(servers)}
    protocol = kwargs.get("security_protocol")
    if protocol:
        out["security.protocol"] = str(protocol).lower()
    if kwargs.get("sasl_mechanism"):
        out["sasl.mechanisms"] = str(kwargs["sasl_mechanism"])
        if kwargs.get("sasl_plain_username") is not None:
            out["sasl.username"] = str(kwargs["sasl_plain_username"])
            out["sasl.password"] = str(kwargs.get("sasl_plain_password") or "")
    for java_key, rd_key in _PEM_KEYS.items():
        if java.get(java_key):
            out[rd_key] = java[java_key]
    if java.get("max.request.size"):
        # How a target with a small message.max.bytes is configured (as for the workers):
        # a larger record is refused before it is sent, and its partition stops.
        out["message.max.bytes"] = str(max(1000, int(java["max.request.size"])))
    return out


def rdkafka_consumer_config(java: Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings of a consumer of the cluster `java` describes: how to reach it,
    and what it reads of transactions.

    `isolation.level` is the one setting that changes which records a copy holds, so both
    paths read alike: as configured, else `read_uncommitted` -- the Java client's default
    and the workers' -- where librdkafka's own default would be `read_committed`.
    """
    kwargs, _ = consumer_kwargs(java)
    return {**_connection(java, kwargs),
            "isolation.level": str(kwargs.get("isolation_level") or "read_uncommitted")}
