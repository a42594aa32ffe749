"""Trust and key stores in the formats Kafka clients read: PEM, PKCS12 and (advice for) JKS.

Kafka's `ssl.truststore.type` / `ssl.keystore.type` default to JKS, and most real MM2
deployments use JKS or PKCS12 files. Python's `ssl` module reads PEM only, so PKCS12 stores are
decoded with the `cryptography` package and handed to OpenSSL as PEM. JKS is Java's own format;
no maintained Python library reads it, so a JKS store is refused with the one `keytool` command
that converts it to PKCS12 (which Java clients read too, so the same file serves both).

Errors are `ConfigError`s naming the unprefixed client key (`ssl.truststore.location`); the
config check in `mirrorline.kafka.preflight` adds the cluster prefix and the line.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    pkcs12,
)

from mirrorline.core.errors import ConfigError

__all__ = ["STORE_TYPES", "jks_hint", "pkcs12_identity_pem", "pkcs12_trust_pem"]

STORE_TYPES: Final = ("PEM", "PKCS12", "JKS")


def jks_hint(location: str, type_key: str) -> str:
    """The one-line conversion of a JKS store to PKCS12."""
    target = os.path.splitext(location)[0] + ".p12"
    return (f"JKS stores cannot be read by Mirrorline; convert it once with `keytool "
            f"-importkeystore -srckeystore {location} -srcstoretype JKS -destkeystore "
            f"{target} -deststoretype PKCS12` and set {type_key} = PKCS12 (Java clients read "
            f"PKCS12 too)")


def _read(location: str, key: str) -> bytes:
    try:
        with open(location, "rb") as handle:
            return handle.read()
    except OSError as e:
        raise ConfigError(key, f"cannot read {location}: {e.strerror or e}") from None


def _load(location: str, password: str | None, key: str, password_key: str) -> tuple[
        PrivateKeyTypes | None, x509.Certificate | None, list[x509.Certificate]]:
    data = _read(location, key)
    secret = password.encode() if password else None
    try:
        private_key, cert, extra = pkcs12.load_key_and_certificates(data, secret)
    except ValueError as e:
        reason = str(e) or "not a PKCS12 store"
        if "password" in reason.lower() or "mac" in reason.lower():
            reason = f"wrong or missing password (check {password_key})"
        raise ConfigError(key, f"cannot read the PKCS12 store {location}: {reason}") from None
    return private_key, cert, list(extra)


def pkcs12_trust_pem(location: str, password: str | None) -> str:
    """Every certificate of a PKCS12 trust store, as PEM (OpenSSL's `cadata`)."""
    _key, cert, extra = _load(location, password, "ssl.truststore.location",
                              "ssl.truststore.password")
    certs = ([cert] if cert is not None else []) + extra
    if not certs:
        raise ConfigError("ssl.truststore.location",
                          f"the PKCS12 store {location} holds no certificate")
    return "".join(c.public_bytes(Encoding.PEM).decode() for c in certs)


def pkcs12_identity_pem(location: str, password: str | None) -> str:
    """The private key and certificate chain of a PKCS12 key store, as one PEM text."""
    key, cert, extra = _load(location, password, "ssl.keystore.location",
                             "ssl.keystore.password")
    if key is None or cert is None:
        raise ConfigError("ssl.keystore.location",
                          f"the PKCS12 store {location} holds no private key with a certificate")
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    return pem + "".join(c.public_bytes(Encoding.PEM).decode() for c in [cert, *extra])


def load_pem_chain(context: ssl.SSLContext, pem: str, key: str) -> None:
    """Load a key + chain held in memory: the standard library only loads files, so write a
    private temporary file (mode 0600) and remove it straight away."""
    fd, path = tempfile.mkstemp(prefix="mirrorline-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(pem)
        context.load_cert_chain(path)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(key, f"cannot load the client certificate and key: {e}") from None
    finally:
        os.unlink(path)
