"""Calling the controller's Admin API from `mirrorline admin`: connection, leader redirect,
errors and printing an answer.

Kept apart from the command table (`mirrorline.cli.admin`) so that every command module --
flows, status, failover, drift, heartbeat -- calls the controller the same way and exits
with the same statuses: 0 on success, 1 when the call fails (`mirrorline: <CODE NAME>:
<server message>` or `mirrorline: cannot reach the controller at HOST:PORT (...)`), 2 for
a usage error (argparse's status), 130 on Ctrl-C.

A controller that is not the leader answers UNAVAILABLE with the trailing metadata
`leader-address`; every call is then retried once against that address
(`leader_redirect` decides). A controller that was just elected and is still taking
office, or one that knows of no leader yet, answers UNAVAILABLE with `retry-after-ms`:
the call is asked again there after that wait, until the call's deadline has passed
(`retry_after`), so a command run right after a deployment started does not fail.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar, cast

import grpc
from google.protobuf.message import Message

from mirrorline import grpcsecure
from mirrorline.cli import admin_security
from mirrorline.cli.admin_args import RequestError, call_deadline, resolve_server
from mirrorline.cli.admin_format import printable, to_json
from mirrorline.core.errors import ConfigError
from mirrorline.grpcsecure import ClientCredentials
from mirrorline.v1 import admin_pb2_grpc

__all__ = [
    "LEADER_ADDRESS_KEY",
    "RETRY_AFTER_MS_KEY",
    "AdminError",
    "Connection",
    "built",
    "connection_of",
    "emit",
    "fail",
    "follow",
    "invoke",
    "leader_redirect",
    "reached",
    "redirect_of",
    "retry_after",
    "unary",
    "unreachable_message",
    "usage_error",
]

LEADER_ADDRESS_KEY: Final = "leader-address"
RETRY_AFTER_MS_KEY: Final = "retry-after-ms"

Req = TypeVar("Req", bound=Message)
Resp = TypeVar("Resp", bound=Message)


class AdminError(Exception):
    """A call that failed; the text is what follows `mirrorline: ` on stderr."""


# --------------------------------------------------------------------------- redirects


def leader_redirect(code: grpc.StatusCode | None,
                    trailing_metadata: Iterable[tuple[str, str | bytes]] | None,
                    *, current: str | None = None) -> str | None:
    """The address to retry a failed call against, or None.

    Only UNAVAILABLE with a non-blank `leader-address` trailing metadata entry redirects
    (the key is compared case-insensitively); an address equal to `current`, the one just
    called, does not.
    """
    if code is not grpc.StatusCode.UNAVAILABLE or not trailing_metadata:
        return None
    for key, value in trailing_metadata:
        if key.lower() != LEADER_ADDRESS_KEY:
            continue
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        address = text.strip()
        if address and address != current:
            return address
        return None
    return None


def retry_after(code: grpc.StatusCode | None,
                trailing_metadata: Iterable[tuple[str, str | bytes]] | None) -> float | None:
    """Seconds to wait before asking the same controller again, or None (not to)."""
    if code is not grpc.StatusCode.UNAVAILABLE or not trailing_metadata:
        return None
    for key, value in trailing_metadata:
        if key.lower() == RETRY_AFTER_MS_KEY:
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            try:
                return min(max(int(text), 0), 5_000) / 1000
            except ValueError:
                return None
    return None


def _status(exc: grpc.RpcError) -> tuple[grpc.StatusCode | None,
                                         list[tuple[str, str | bytes]]]:
    try:
        code, metadata = exc.code(), exc.trailing_metadata()
    except AttributeError:  # an RpcError that is not a call (no status to look at)
        return None, []
    # At run time each entry is a (key, value) named tuple (grpc's _Metadatum).
    return code, [cast(tuple[str, str | bytes], tuple(cast(Iterable[Any], entry)))
                  for entry in metadata or ()]


def redirect_of(exc: grpc.RpcError, address: str) -> str | None:
    """The leader a failed call names, or None."""
    code, pairs = _status(exc)
    return leader_redirect(code, pairs, current=address)


@dataclass(frozen=True)
class Connection:
    server: str
    timeout: float
    credentials: ClientCredentials = field(default_factory=ClientCredentials)


def follow(connection: Connection, address: str, leader: str | None) -> str | None:
    """The leader to retry at, None to give up; AdminError when the redirect is refused."""
    if leader is None:
        return None
    if not admin_security.may_follow(leader, connection.credentials):
        raise AdminError(admin_security.refused_redirect(address, leader))
    return leader


# --------------------------------------------------------------------------- failures


def error_message(code: grpc.StatusCode, details: str | None) -> str:
    """`INVALID_ARGUMENT: topics: ...` (the code name alone when there are no details)."""
    return f"{code.name}: {details}" if details else code.name


def unreachable_message(address: str, details: str | None) -> str:
    return f"cannot reach the controller at {address} ({details or 'no answer'})"


def reached(channel: grpc.Channel) -> bool:
    """Whether `channel` is connected: after an UNAVAILABLE or DEADLINE_EXCEEDED, tells a
    server that answered so from one that was never reached."""
    ready = grpc.channel_ready_future(channel)
    try:
        ready.result(timeout=0.2)
    except grpc.FutureTimeoutError:
        return False
    finally:
        ready.cancel()
    return True


def failure(exc: grpc.RpcError, address: str, channel: grpc.Channel) -> AdminError:
    code, details = exc.code(), exc.details()
    transport = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    if code in transport and not reached(channel):
        return AdminError(unreachable_message(address, details))
    return AdminError(error_message(code, details))


# --------------------------------------------------------------------------- calls


def invoke(connection: Connection,
           method: Callable[[admin_pb2_grpc.AdminStub],
                            grpc.UnaryUnaryMultiCallable[Req, Resp]],
           request: Req) -> Resp:
    """One unary call with the deadline, retried once at the leader, and asked again while
    the controller says to retry shortly (within the deadline); AdminError on failure."""
    address = connection.server
    deadline = time.monotonic() + connection.timeout
    redirected = False
    while True:
        with grpcsecure.blocking_channel(address, connection.credentials) as channel:
            try:
                return method(admin_pb2_grpc.AdminStub(channel))(
                    request, timeout=max(deadline - time.monotonic(), 0.1))
            except grpc.RpcError as exc:
                wait = retry_after(*_status(exc))
                if wait is not None and time.monotonic() + wait < deadline:
                    time.sleep(wait)
                    continue
                leader = follow(connection, address,
                                None if redirected else redirect_of(exc, address))
                if leader is None:
                    raise failure(exc, address, channel) from None
                address, redirected = leader, True


def connection_of(args: argparse.Namespace) -> Connection:
    """The controller, deadline and credentials the command line (and environment) give."""
    try:
        creds = admin_security.credentials(args)
    except ConfigError as exc:
        raise AdminError(f"credentials: {exc}") from None
    return Connection(resolve_server(args.server, os.environ), call_deadline(args), creds)


def emit(args: argparse.Namespace, response: Message, render: Callable[[], str]) -> None:
    # Text output escapes control and bidi characters that came from the server; JSON
    # escapes them itself (json.dumps writes them as \uXXXX).
    print(to_json(response) if args.output == "json" else printable(render()))


def fail(error: AdminError) -> int:
    print(printable(f"mirrorline: {error}"), file=sys.stderr)
    return 1


def unary(args: argparse.Namespace,
          method: Callable[[admin_pb2_grpc.AdminStub],
                           grpc.UnaryUnaryMultiCallable[Req, Resp]],
          request: Req, render: Callable[[Resp], str],
          warnings: Callable[[Resp], Iterable[str]] | None = None,
          problem: Callable[[Resp], str | None] | None = None) -> int:
    """Call, print the answer (and its `warnings` on stderr, unless the output is JSON);
    an answer in which `problem` finds one is printed too, but exits with status 1."""
    try:
        response = invoke(connection_of(args), method, request)
    except AdminError as error:
        return fail(error)
    except KeyboardInterrupt:
        return 130
    emit(args, response, lambda: render(response))
    if warnings is not None and args.output != "json":
        for warning in warnings(response):
            print(printable(f"mirrorline: warning: {warning}"), file=sys.stderr)
    found = problem(response) if problem is not None else None
    if found is not None:
        print(printable(f"mirrorline: {found}"), file=sys.stderr)
        return 1
    return 0


# --------------------------------------------------------------------------- usage


def usage_error(args: argparse.Namespace, message: str) -> int:
    parser: argparse.ArgumentParser = args.command_parser
    parser.error(message)  # exits with status 2


def built(args: argparse.Namespace, build: Callable[[argparse.Namespace], Req]) -> Req:
    """`build(args)`; a RequestError is a usage error (exit status 2)."""
    try:
        return build(args)
    except RequestError as exc:
        usage_error(args, str(exc))
        raise AssertionError("unreachable") from None  # pragma: no cover
