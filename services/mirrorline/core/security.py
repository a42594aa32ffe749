"""gRPC transport security and identities: what the properties file says, and token checks.

One deployment has one answer to "how do our services talk": the `mirrorline.grpc.*` keys
of the properties file every service already reads. Every gRPC server and client of the
process uses it (`mirrorline.grpcsecure`), so a service added later inherits TLS and
authentication without code of its own.

Tokens are stored hashed (SHA-256 of a high-entropy random token: a slow password hash
buys nothing against a 256-bit secret, and a fast one keeps every call cheap) and
compared in constant time. Certificate identities are the common name of a client
certificate that the deployment's CA signed.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from mirrorline.core.errors import ConfigError
from mirrorline.core.roles import Role

TOKEN_PREFIX = "sha256:"


@dataclass(frozen=True)
class Identity:
    name: str
    role: Role
    how: str  # "token", "certificate" or "anonymous"


#: Who calls when a deployment has no authentication at all (loopback only, see below).
ANONYMOUS = Identity("anonymous", Role.ADMIN, "anonymous")


@dataclass(frozen=True)
class GrpcSecurity:
    """The `mirrorline.grpc.*` / `mirrorline.admin.*` keys, resolved."""

    certificate: str | None = None        # PEM file: this service's certificate chain
    key: str | None = None                # PEM file: its private key
    ca: str | None = None                 # PEM file: CA that signs servers and clients
    client_auth_required: bool = False    # mTLS: refuse connections without a client cert
    server_name: str | None = None        # name to verify servers by, instead of the host
    insecure: bool = False                # allow plaintext on non-loopback addresses
    tokens_file: str | None = None        # named, hashed tokens and certificate identities
    service_token_file: str | None = None  # this deployment's service token (plaintext)

    @property
    def tls(self) -> bool:
        return self.certificate is not None

    @property
    def authenticates(self) -> bool:
        return self.tokens_file is not None


def _flag(raw: Mapping[str, str], key: str) -> bool:
    value = raw.get(key, "false").strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(key, f"must be true or false, not {value!r}")
    return value == "true"


def grpc_security(raw: Mapping[str, str]) -> GrpcSecurity:
    """Read the security keys of a properties file; raise ConfigError naming the key."""
    def path(key: str) -> str | None:
        value = raw.get(key, "").strip()
        return value or None

    found = GrpcSecurity(
        certificate=path("mirrorline.grpc.tls.certificate"), key=path("mirrorline.grpc.tls.key"),
        ca=path("mirrorline.grpc.tls.ca"),
        client_auth_required=_flag(raw, "mirrorline.grpc.tls.client.auth.required"),
        server_name=path("mirrorline.grpc.tls.server.name"),
        insecure=_flag(raw, "mirrorline.grpc.insecure"),
        tokens_file=path("mirrorline.admin.tokens.file"),
        service_token_file=path("mirrorline.grpc.service.token.file"))
    if (found.certificate is None) != (found.key is None):
        raise ConfigError("mirrorline.grpc.tls.key" if found.key is None
                          else "mirrorline.grpc.tls.certificate",
                          "TLS needs both mirrorline.grpc.tls.certificate and "
                          "mirrorline.grpc.tls.key")
    if found.tls and found.ca is None:
        raise ConfigError("mirrorline.grpc.tls.ca", "is required with TLS: services verify "
                                                   "each other against this CA")
    if found.client_auth_required and not found.tls:
        raise ConfigError("mirrorline.grpc.tls.client.auth.required",
                          "needs TLS (mirrorline.grpc.tls.certificate/key/ca)")
    if found.authenticates and not found.tls:
        raise ConfigError("mirrorline.admin.tokens.file", "bearer tokens need TLS "
                          "(mirrorline.grpc.tls.*): over plaintext anyone on the path reads them")
    if found.service_token_file is not None and not found.tls:
        raise ConfigError("mirrorline.grpc.service.token.file", "the service token is only "
                          "sent over TLS (mirrorline.grpc.tls.*)")
    if (found.authenticates and not found.client_auth_required
            and found.service_token_file is None):
        raise ConfigError("mirrorline.admin.tokens.file", (
            "the services need an identity too: set mirrorline.grpc.service.token.file (a "
            "token with role service), or mirrorline.grpc.tls.client.auth.required = true "
            "with the service certificate's name listed with role service"))
    return found


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_problem(host: str, security: GrpcSecurity) -> str | None:
    """Why serving on `host` would expose the API, or None.

    Loopback without TLS stays allowed (a developer's machine, `make demo`); any other
    address needs TLS and authentication unless `mirrorline.grpc.insecure = true`.
    """
    if is_loopback(host) or security.insecure:
        return None
    if not security.tls:
        return (f"refusing to serve gRPC on {host} without TLS: set mirrorline.grpc.tls.* "
                "(see docs/security.md), or mirrorline.grpc.insecure = true "
                "to accept an unauthenticated, plaintext API")
    if not security.authenticates:
        return (f"refusing to serve gRPC on {host} without authentication: set "
                "mirrorline.admin.tokens.file, or mirrorline.grpc.insecure = true")
    return None


# -- tokens -------------------------------------------------------------------------------

def new_token() -> str:
    """A fresh 256-bit token, URL-safe."""
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return TOKEN_PREFIX + hashlib.sha256(token.strip().encode()).hexdigest()


@dataclass(frozen=True)
class Identities:
    """The tokens file: `NAME ROLE sha256:HEX` (a token) or `NAME ROLE cert` (the common
    name of a client certificate). `#` starts a comment."""

    tokens: tuple[tuple[bytes, str, Role], ...] = ()
    certificates: Mapping[str, Role] = field(default_factory=dict)

    def by_token(self, token: str) -> Identity | None:
        digest = hash_token(token).encode()
        found: Identity | None = None
        for stored, name, role in self.tokens:  # every entry compared: constant time
            if hmac.compare_digest(stored, digest):
                found = Identity(name, role, "token")
        return found

    def by_certificate(self, common_name: str) -> Identity | None:
        role = self.certificates.get(common_name)
        return None if role is None else Identity(common_name, role, "certificate")


def parse_identities(text: str, *, source: str = "tokens file") -> Identities:
    tokens: list[tuple[bytes, str, Role]] = []
    certificates: dict[str, Role] = {}
    names: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 3:
            raise ConfigError(None, "each line is NAME ROLE CREDENTIAL (sha256:HEX or cert)",
                              line=number, source=source)
        name, role_name, credential = words
        try:
            role = Role(role_name)
        except ValueError:
            raise ConfigError(None, f"unknown role {role_name!r} (one of "
                              f"{', '.join(r.value for r in Role)})",
                              line=number, source=source) from None
        if name in names:
            raise ConfigError(None, f"name {name!r} is defined twice", line=number,
                              source=source)
        names.add(name)
        if credential == "cert":
            certificates[name] = role
            continue
        digest = credential.removeprefix(TOKEN_PREFIX)
        if not credential.startswith(TOKEN_PREFIX) or len(digest) != 64 or any(
                c not in "0123456789abcdef" for c in digest):
            raise ConfigError(None, "a token is stored as sha256:<64 lowercase hex digits> "
                              "(`mirrorline admin token new` prints one); never the token "
                              "itself", line=number, source=source)
        tokens.append((credential.encode(), name, role))
    return Identities(tuple(tokens), certificates)
