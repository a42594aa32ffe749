"""The one place gRPC channels and server credentials are made.

A process learns its deployment's `mirrorline.grpc.*` settings once, at start
(`configure`), from the properties file it was given. From then on every server
(`ServiceServer`) and every channel made here uses them: TLS with the deployment's CA,
the service certificate as client certificate (mTLS), and the service token when one is
configured. Services written later get all of this by using `ServiceServer` and
`channel()`; none of them handles credentials itself.

Certificates and tokens are small files read once, when configured (before any event
loop work), never per call.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import grpc

from mirrorline.core.errors import ConfigError
from mirrorline.core.security import GrpcSecurity, Identities, parse_identities

log = logging.getLogger(__name__)

#: Largest request or reply a Mirrorline gRPC endpoint accepts (gRPC's usual 4 MiB, set
#: explicitly so that no endpoint depends on a library default).
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
CHANNEL_OPTIONS = (("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES))


def _read(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise ConfigError(key, f"cannot read {path}: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class ClientCredentials:
    """What a client presents and trusts; empty means plaintext, anonymous."""

    ca: bytes | None = None
    certificate: bytes | None = None
    key: bytes | None = None
    token: str | None = None
    server_name: str | None = None

    @property
    def tls(self) -> bool:
        return self.ca is not None

    @classmethod
    def from_files(cls, *, ca: str | None = None, certificate: str | None = None,
                   key: str | None = None, token_file: str | None = None,
                   token: str | None = None, server_name: str | None = None
                   ) -> ClientCredentials:
        """For the CLI: paths given as options; a token from a file or as text."""
        if token is None and token_file is not None:
            token = _read(token_file, "--token-file").decode().strip()
        if (certificate is None) != (key is None):
            raise ConfigError("--cert", "a client certificate needs both --cert and --key")
        if certificate and ca is None:
            raise ConfigError("--ca", "a client certificate is only used over TLS: give the "
                                      "CA that signed the server's certificate")
        if token and ca is None:
            raise ConfigError("--ca", "a token is only sent over TLS: give the CA that "
                                      "signed the server's certificate")
        return cls(ca=_read(ca, "--ca") if ca else None,
                   certificate=_read(certificate, "--cert") if certificate else None,
                   key=_read(key, "--key") if key else None,
                   token=token or None, server_name=server_name)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        assert self.ca is not None
        credentials = grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.certificate)
        if self.token:
            credentials = grpc.composite_channel_credentials(
                credentials, grpc.access_token_call_credentials(self.token))
        return credentials

    def options(self) -> tuple[tuple[str, object], ...]:
        extra: tuple[tuple[str, object], ...] = ()
        if self.server_name:
            extra = (("grpc.ssl_target_name_override", self.server_name),)
        return (*CHANNEL_OPTIONS, *extra)


@dataclass(frozen=True)
class ProcessSecurity:
    """The security a service process runs with: server side and its own client side."""

    settings: GrpcSecurity
    client: ClientCredentials
    server_certificate: bytes | None = None
    server_key: bytes | None = None
    identities: Identities | None = None

    def server_credentials(self) -> grpc.ServerCredentials | None:
        if not self.settings.tls:
            return None
        assert self.server_certificate is not None and self.server_key is not None
        return grpc.ssl_server_credentials(
            [(self.server_key, self.server_certificate)], root_certificates=self.client.ca,
            require_client_auth=self.settings.client_auth_required)


def load(settings: GrpcSecurity) -> ProcessSecurity:
    """Read every file the settings name; ConfigError names the key of a missing one."""
    certificate = key = ca = None
    if settings.tls:
        assert settings.certificate and settings.key and settings.ca
        certificate = _read(settings.certificate, "mirrorline.grpc.tls.certificate")
        key = _read(settings.key, "mirrorline.grpc.tls.key")
        ca = _read(settings.ca, "mirrorline.grpc.tls.ca")
    token = None
    if settings.service_token_file:
        token = _read(settings.service_token_file,
                      "mirrorline.grpc.service.token.file").decode().strip()
    identities = None
    if settings.tokens_file:
        identities = parse_identities(
            _read(settings.tokens_file, "mirrorline.admin.tokens.file").decode(),
            source=settings.tokens_file)
    client = ClientCredentials(ca=ca, certificate=certificate, key=key, token=token,
                               server_name=settings.server_name)
    return ProcessSecurity(settings, client, certificate, key, identities)


_process = ProcessSecurity(GrpcSecurity(), ClientCredentials())


def configure(security: ProcessSecurity) -> None:
    """Set this process's gRPC security (once, at start, from its properties file)."""
    global _process
    _process = security
    if security.settings.insecure:
        log.warning("mirrorline.grpc.insecure = true: non-loopback gRPC may be plaintext and "
                    "unauthenticated")


def current() -> ProcessSecurity:
    return _process


def channel(address: str, credentials: ClientCredentials | None = None) -> grpc.aio.Channel:
    """An asyncio channel to another Mirrorline service (this process's credentials)."""
    creds = credentials or _process.client
    if creds.tls:
        return grpc.aio.secure_channel(address, creds.channel_credentials(),
                                       options=creds.options())
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)


def blocking_channel(address: str, credentials: ClientCredentials) -> grpc.Channel:
    """A blocking channel, for the CLI."""
    if credentials.tls:
        return grpc.secure_channel(address, credentials.channel_credentials(),
                                   options=credentials.options())
    return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)


def token_from_environment() -> str | None:
    return os.environ.get("MIRRORLINE_TOKEN") or None
