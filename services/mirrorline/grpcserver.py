"""The gRPC server every Mirrorline service runs: its own services plus health and reflection.

Health follows the standard `grpc.health.v1` protocol so that Kubernetes probes,
`grpc_health_probe` and load balancers need nothing Mirrorline-specific. The overall
status ("" service) mirrors the service's own: NOT_SERVING while a cluster it needs is
unreachable, so a probe reports exactly what an operator would want to be paged for.

Security is applied here for every service alike: the process's TLS credentials
(`mirrorline.grpcsecure`), the authentication/role/bounds interceptor
(`mirrorline.grpcauth`), the message size limit, and the refusal to serve a non-loopback
address without TLS and authentication unless the deployment says it accepts that.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from mirrorline import grpcsecure
from mirrorline.core.errors import ConfigError
from mirrorline.core.security import bind_problem, is_loopback
from mirrorline.grpcauth import AuthInterceptor
from mirrorline.ports import check_listenable, listen_failure

log = logging.getLogger(__name__)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class ServiceServer:
    """A `grpc.aio` server with health and reflection, started and stopped explicitly.

    Usage: construct, `add(...)` each servicer, `await start()`, later `await stop()`.
    """

    def __init__(self, *, name: str, host: str = "127.0.0.1", port: int = 0,
                 interceptors: Sequence[grpc.aio.ServerInterceptor] = ()) -> None:
        self.name = name
        self._interceptors = tuple(interceptors)
        self._host = host
        self._requested_port = port
        # The grpc.aio server binds to the running loop: it is created in start().
        self._server: grpc.aio.Server | None = None
        self._health = health_aio.HealthServicer()
        self._registrations: list[tuple[Callable[[Any, grpc.aio.Server], None], Any]] = []
        health_name = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
        self._service_names: list[str] = [health_name]
        self._serving: bool | None = None
        self.port: int | None = None

    def add(self, register: Callable[[Any, grpc.aio.Server], None], servicer: Any,
            full_names: Sequence[str]) -> None:
        """Register a servicer with its generated `add_XServicer_to_server` function."""
        self._registrations.append((register, servicer))
        self._service_names.extend(full_names)

    async def start(self) -> int:
        security = grpcsecure.current()
        problem = bind_problem(self._host, security.settings)
        if problem is not None:
            raise ConfigError("mirrorline.grpc.tls.certificate", f"{self.name}: {problem}")
        if not is_loopback(self._host) and security.settings.insecure and (
                not security.settings.tls or not security.settings.authenticates):
            log.warning("%s: serving gRPC on %s without %s (mirrorline.grpc.insecure = true)",
                        self.name, self._host,
                        "TLS" if not security.settings.tls else "authentication")
        server = self._server = grpc.aio.server(
            interceptors=[AuthInterceptor(self.name, security.identities), *self._interceptors],
            # No SO_REUSEPORT: a second server on a port in use must fail, not share it.
            options=[*grpcsecure.CHANNEL_OPTIONS, ("grpc.so_reuseport", 0)])
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        for register, servicer in self._registrations:
            register(servicer, server)
        reflection.enable_server_reflection(
            [*self._service_names, reflection.SERVICE_NAME], server
        )
        address = f"{self._host}:{self._requested_port}"
        await check_listenable(self._host, self._requested_port, "gRPC")
        credentials = security.server_credentials()
        try:
            port: int = (server.add_secure_port(address, credentials)
                         if credentials is not None else server.add_insecure_port(address))
        except RuntimeError:  # taken between the check and now
            raise listen_failure(self._host, self._requested_port, "gRPC",
                                 "the address cannot be bound") from None
        if port == 0:
            raise listen_failure(self._host, self._requested_port, "gRPC",
                                 "the address cannot be bound")
        await server.start()
        self.port = port
        await self.set_serving(False)
        log.info("%s: gRPC on %s:%d (health, reflection; %s%s)", self.name, self._host, port,
                 "TLS" if credentials is not None else "plaintext",
                 ", authenticated" if security.identities is not None else "")
        return port

    async def set_serving(self, serving: bool) -> None:
        """Publish the overall health; only transitions are written."""
        if serving == self._serving:
            return
        self._serving = serving
        status = SERVING if serving else NOT_SERVING
        for service in ("", *self._service_names):
            await self._health.set(service, status)

    async def stop(self, grace: float = 2.0) -> None:
        if self._server is None:
            return
        await self._health.enter_graceful_shutdown()
        await self._server.stop(grace)
        self._server = None
