"""Trust and key stores in the formats Kafka clients read: PEM, PKCS12 and JKS.

Kafka's `ssl.truststore.type` / `ssl.keystore.type` default to JKS, and most real MM2
deployments point at JKS or PKCS12 files. Python's `ssl` module reads PEM only, so PKCS12
stores are decoded with the `cryptography` package and handed to OpenSSL as PEM.

JKS is Java's own format, and no maintained Python library reads it. A JKS store is read by
the JDK's own `keytool` (the reference reader of the format, present wherever MM2 ran): once
per store and process, `keytool -importkeystore` copies it into a PKCS12 file in a private
temporary folder (mode 0700) under a random password, which is then read as above and
deleted at once. Passwords reach `keytool` through its environment (`-srcstorepass:env`),
never its command line, which other users of the host can read. As in Java's `KeyStore`
("keystore.type.compat"), a store of type JKS that is really PKCS12 is read as PKCS12.

Errors are `ConfigError`s naming the unprefixed client key (`ssl.truststore.password`); the
config check in `mirrorline.kafka.preflight` adds the cluster prefix and the line. No error
carries a password.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import ssl
import subprocess
import tempfile
from pathlib import Path
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

__all__ = ["STORE_TYPES", "keytool", "load_pem_chain", "store_identity_pem",
           "store_trust_pem"]

STORE_TYPES: Final = ("PEM", "PKCS12", "JKS")
#: The first four bytes of every JKS store.
JKS_MAGIC: Final = b"\xfe\xed\xfe\xed"
_KEYTOOL_TIMEOUT: Final = 60.0

#: (store kind, absolute path, digest of the passwords) -> PKCS12 bytes and their password.
_converted: dict[tuple[str, str, bytes], tuple[bytes, bytes]] = {}


def keytool() -> str | None:
    """`$JAVA_HOME/bin/keytool` when set, else `keytool` on PATH; None without a JDK."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "keytool").is_file():
        return str(Path(java_home) / "bin" / "keytool")
    return shutil.which("keytool")


def _read(location: str, key: str) -> bytes:
    try:
        with open(location, "rb") as handle:
            return handle.read()
    except OSError as e:
        raise ConfigError(key, f"cannot read {location}: {e.strerror or e}") from None


def _parse(data: bytes, password: bytes | None, location: str, key: str,
           password_key: str, kind: str) -> tuple[
        PrivateKeyTypes | None, x509.Certificate | None, list[x509.Certificate]]:
    try:
        private_key, cert, extra = pkcs12.load_key_and_certificates(data, password)
    except ValueError as e:
        reason = str(e) or "not a PKCS12 store"
        if "password" in reason.lower() or "mac" in reason.lower():
            raise ConfigError(password_key, f"does not open the {kind} store {location} "
                                            "(wrong or missing password)") from None
        raise ConfigError(key, f"cannot read the {kind} store {location}: {reason}") from None
    return private_key, cert, list(extra)


def _load(location: str, password: str | None, key_password: str | None, *, store: str,
          jks: bool) -> tuple[PrivateKeyTypes | None, x509.Certificate | None,
                              list[x509.Certificate]]:
    key, password_key = f"ssl.{store}.location", f"ssl.{store}.password"
    data = _read(location, key)
    if jks and data.startswith(JKS_MAGIC):
        converted, secret = _jks_as_pkcs12(location, password, key_password, store=store)
        return _parse(converted, secret, location, key, password_key, "JKS")
    return _parse(data, password.encode() if password else None, location, key, password_key,
                  "JKS" if jks else "PKCS12")


def store_trust_pem(location: str, password: str | None, *, jks: bool = False) -> str:
    """Every certificate of a PKCS12 (or, with `jks`, JKS) trust store, as PEM (`cadata`)."""
    _key, cert, extra = _load(location, password, None, store="truststore", jks=jks)
    certs = ([cert] if cert is not None else []) + extra
    if not certs:
        raise ConfigError("ssl.truststore.location",
                          f"the store {location} holds no certificate")
    return "".join(c.public_bytes(Encoding.PEM).decode() for c in certs)


def store_identity_pem(location: str, password: str | None, key_password: str | None = None,
                       *, jks: bool = False) -> str:
    """The private key and certificate chain of a PKCS12 (or JKS) key store, as one PEM text.

    A JKS key entry has a password of its own: `ssl.key.password`, else the store's (as
    Java's `KeyManagerFactory` is given by Kafka's clients).
    """
    key, cert, extra = _load(location, password, key_password, store="keystore", jks=jks)
    if key is None or cert is None:
        raise ConfigError("ssl.keystore.location",
                          f"the store {location} holds no private key with a certificate")
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    return pem + "".join(c.public_bytes(Encoding.PEM).decode() for c in [cert, *extra])


# --------------------------------------------------------------------------- JKS


def _jks_as_pkcs12(location: str, password: str | None, key_password: str | None, *,
                   store: str) -> tuple[bytes, bytes]:
    """The JKS store as PKCS12 bytes and their password, converted once per process."""
    digest = hashlib.sha256(f"{password}\0{key_password}".encode()).digest()
    cache_key = (store, os.path.abspath(location), digest)
    cached = _converted.get(cache_key)
    if cached is None:
        cached = _convert(location, password, key_password, store=store)
        _converted[cache_key] = cached
    return cached


def _convert(location: str, password: str | None, key_password: str | None, *,
             store: str) -> tuple[bytes, bytes]:
    type_key, password_key = f"ssl.{store}.type", f"ssl.{store}.password"
    tool = keytool()
    if tool is None:
        raise ConfigError(type_key, f"JKS stores ({location}) are read with the JDK's keytool, "
                          "which is not on PATH (nor in $JAVA_HOME/bin): install a JDK, or "
                          f"convert the store once with `keytool -importkeystore -srckeystore "
                          f"{location} -srcstoretype JKS -destkeystore "
                          f"{os.path.splitext(location)[0]}.p12 -deststoretype PKCS12` and set "
                          f"{type_key} = PKCS12")
    if store == "keystore" and not password:
        raise ConfigError(password_key, f"is needed to read the JKS key store {location}")
    out_password = secrets.token_urlsafe(24)
    env = {**os.environ, "MIRRORLINE_JKS_OUT": out_password}
    source = ["-srckeystore", location, "-srcstoretype", "JKS"]
    if password:
        env["MIRRORLINE_JKS_IN"] = password
        source += ["-srcstorepass:env", "MIRRORLINE_JKS_IN"]
    if store == "keystore" and key_password and key_password != password:
        # Without an alias keytool tries the store password on every key entry (and prompts);
        # a key password of its own is given per entry.
        env["MIRRORLINE_JKS_KEY"] = key_password
        source += ["-srcalias", _key_alias(tool, location, env),
                   "-srckeypass:env", "MIRRORLINE_JKS_KEY",
                   "-destkeypass:env", "MIRRORLINE_JKS_OUT"]
    with tempfile.TemporaryDirectory(prefix="mirrorline-jks-") as private:  # mode 0700
        target = os.path.join(private, "store.p12")
        output = _run(tool, ["-importkeystore", "-noprompt", *source, "-destkeystore", target,
                             "-deststoretype", "PKCS12", "-deststorepass:env",
                             "MIRRORLINE_JKS_OUT"], env, location, store=store)
        try:
            with open(target, "rb") as handle:
                data = handle.read()
        except OSError:
            raise ConfigError(f"ssl.{store}.location", f"keytool could not read the JKS store "
                              f"{location}: {_last_line(output)}") from None
    return data, out_password.encode()


_ALIAS: Final = re.compile(r"^Alias name: (.*)$")


def _key_alias(tool: str, location: str, env: dict[str, str]) -> str:
    """The alias of the store's first private key entry."""
    output = _run(tool, ["-list", "-v", "-keystore", location, "-storetype", "JKS",
                         "-storepass:env", "MIRRORLINE_JKS_IN"], env, location,
                  store="keystore")
    alias = None
    for line in output.splitlines():
        match = _ALIAS.match(line.strip())
        if match:
            alias = match.group(1)
        elif line.strip() == "Entry type: PrivateKeyEntry" and alias is not None:
            return alias
    raise ConfigError("ssl.keystore.location",
                      f"the JKS store {location} holds no private key entry")


def _run(tool: str, args: list[str], env: dict[str, str], location: str, *,
         store: str) -> str:
    try:
        done = subprocess.run([tool, *args], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=_KEYTOOL_TIMEOUT,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ConfigError(f"ssl.{store}.location", f"keytool could not read the JKS store "
                          f"{location}: {e}") from None
    output = done.stdout + done.stderr
    if done.returncode == 0:
        return output
    lowered = output.lower()
    if "password was incorrect" in lowered or "tampered" in lowered:
        raise ConfigError(f"ssl.{store}.password", f"does not open the JKS store {location} "
                          "(wrong or missing password)")
    if "cannot recover key" in lowered or "too many failures" in lowered \
            or "enter key password" in lowered:
        raise ConfigError("ssl.key.password", f"does not open the private key of the JKS "
                          f"store {location} (wrong or missing key password)")
    if "invalid keystore format" in lowered or "eofexception" in lowered:
        raise ConfigError(f"ssl.{store}.location", f"{location} is not a JKS store")
    raise ConfigError(f"ssl.{store}.location", f"keytool could not read the JKS store "
                      f"{location}: {_last_line(output)}")


def _last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


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
