"""Default ports of every Mirrorline service (one place for this fact; the README lists it).

gRPC ports serve the service's API, the standard health service and reflection;
metrics ports serve Prometheus text at /metrics. Replicator workers started by
`mirrorline run --workers N` use consecutive ports from the replicator's base.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket

from mirrorline.core.errors import ListenError

GRPC_PORTS = {
    "controller": 7100,
    "replicator": 7110,
    "checkpointer": 7120,
    "heartbeat": 7130,
    "configsync": 7140,
    "spark-executor": 7150,
}

METRICS_PORTS = {
    "controller": 9700,
    "replicator": 9710,
    "checkpointer": 9720,
    "heartbeat": 9730,
    "configsync": 9740,
    "spark-executor": 9750,
}


def run_ports(workers: int, offset: int = 0, *, spark: bool = False) -> dict[str, int]:
    """Every port `mirrorline run --workers N --port-offset OFFSET [--spark]` listens on,
    by use."""
    out: dict[str, int] = {}
    services = [("controller", 1), ("replicator", workers), ("checkpointer", 1),
                ("heartbeat", 1), ("configsync", 1)]
    if spark:
        services.append(("spark-executor", 1))
    for service, count in services:
        for i in range(count):
            name = service if count == 1 else f"{service}-{i}"
            out[f"{name} gRPC"] = GRPC_PORTS[service] + offset + i
            out[f"{name} metrics"] = METRICS_PORTS[service] + offset + i
    return out


def listen_failure(host: str, port: int, what: str, reason: str) -> ListenError:
    """The one line a service ends with when it cannot listen: the address, what for,
    why, and the options that choose it. `what` is `gRPC` or `metrics`."""
    option = "--grpc-port" if what == "gRPC" else "--metrics-port"
    return ListenError(f"cannot listen on {host}:{port} ({what}): {reason}; check --bind "
                       f"and {option}")


async def check_listenable(host: str, port: int, what: str) -> None:
    """Raise `ListenError` -- one line naming `what` and the address -- when `host:port`
    cannot be bound now: the address is not this host's, or a listener holds the port.

    Tried with a plain socket before the real listener is made: gRPC would print its own
    error from C and raise a generic one, and would share a port another gRPC server
    holds (it sets SO_REUSEPORT). SO_REUSEADDR is set as listeners set it, so a port whose
    last connections are in TIME_WAIT is not taken for busy.
    """
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise listen_failure(host, port, what, exc.strerror or str(exc)) from None
    failures: list[OSError] = []
    for family, kind, proto, _name, address in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                failures.append(exc)
    # A name resolving to several addresses (`localhost`: ::1 and 127.0.0.1) is served
    # on those that can be bound, as listeners do; a port in use on any is a conflict.
    busy = [f for f in failures if f.errno == errno.EADDRINUSE]
    if busy or (failures and len(failures) == len(infos)):
        first = (busy or failures)[0]
        raise listen_failure(host, port, what, first.strerror or str(first))
