"""TLS settings of a Java client config (`ssl.*`) -> the `ssl.SSLContext` aiokafka takes.

Java clients name trust and key stores by file and type, or give PEM inline; Python's
`ssl` module reads PEM files only. This turns each way Kafka allows into one context
(PKCS12 and JKS stores go through `mirrorline.kafka.tls`), with Java's defaults: the
broker's host name is verified unless `ssl.endpoint.identification.algorithm` is empty, and
a store without a type is JKS (a type-less PEM file is read as PEM, for convenience).
Passwords and keys never reach an error message.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from typing import Final

from mirrorline.core.errors import ConfigError
from mirrorline.kafka import tls
from mirrorline.kafka._client_config import ClientConfig

__all__ = ["ssl_context"]

PEM_BLOCK: Final = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.DOTALL)


def ssl_context(c: ClientConfig) -> ssl.SSLContext:
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


def _store_type(c: ClientConfig, type_key: str) -> str | None:
    store_type = c.get(type_key)
    if store_type is None:
        return None
    store_type = store_type.upper()
    if store_type not in tls.STORE_TYPES:
        raise ConfigError(type_key, f"invalid value {store_type!r}: must be PEM, PKCS12 or "
                          "JKS")
    return store_type


def _trust(c: ClientConfig) -> ssl.SSLContext:
    location = c.get("ssl.truststore.location")
    inline = c.get("ssl.truststore.certificates")
    store_type = _store_type(c, "ssl.truststore.type")
    if location and inline:
        raise ConfigError("ssl.truststore.certificates",
                          "set either ssl.truststore.location or ssl.truststore.certificates")
    if location and store_type is None:
        store_type = "PEM" if _is_pem(location, "ssl.truststore.location") else "JKS"
    cadata: str | None = None
    if location and store_type in ("PKCS12", "JKS"):
        cadata = tls.store_trust_pem(location, c.get("ssl.truststore.password"),
                                     jks=store_type == "JKS")
    try:
        if cadata is not None:
            return ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=cadata)
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


def _identity(c: ClientConfig, context: ssl.SSLContext) -> None:
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
    if location and store_type is None:
        store_type = "PEM" if _is_pem(location, "ssl.keystore.location") else "JKS"
    if location and store_type in ("PKCS12", "JKS"):
        tls.load_pem_chain(context, tls.store_identity_pem(
            location, c.get("ssl.keystore.password"), password, jks=store_type == "JKS"),
            "ssl.keystore.location")
    elif location:
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


def _is_pem(location: str, key: str) -> bool:
    """Kafka defaults store types to JKS; a type-less store that is PEM is read as PEM."""
    try:
        with open(location, "rb") as handle:
            head = handle.read(65536)
    except OSError as e:
        raise ConfigError(key, f"cannot read {location}: {_reason(e)}") from None
    return b"-----BEGIN " in head


def _normalise_pem(text: str) -> str:
    """Re-wrap PEM blocks that lost their line breaks (e.g. through `\\` continuations)."""
    blocks = []
    for label, body in PEM_BLOCK.findall(text):
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
