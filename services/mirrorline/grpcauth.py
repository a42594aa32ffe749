"""Authentication, authorisation and request bounds for every gRPC server (one interceptor).

Each call is checked before its handler runs:
1. health checks pass untouched (probes carry no credentials);
2. the caller is identified: a bearer token (`authorization: Bearer ...`) from the tokens
   file, else the common name of a verified client certificate listed there. No identity
   -> UNAUTHENTICATED;
3. the method's role (`mirrorline.core.roles`) must be allowed for the caller's role ->
   otherwise PERMISSION_DENIED naming the role needed;
4. the request must be within `mirrorline.core.bounds` -> otherwise INVALID_ARGUMENT
   naming the field.
Refused calls are logged (who, what, why; never a token). A deployment without a tokens
file authenticates nobody and lets everyone in: allowed on loopback only (see
`mirrorline.core.security.bind_problem`).

The caller's identity is available to handlers through `caller()`.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc
from google.protobuf.message import Message

from mirrorline.core.bounds import oversized
from mirrorline.core.roles import allows, is_public, required_role
from mirrorline.core.security import ANONYMOUS, Identities, Identity

log = logging.getLogger(__name__)

_caller: contextvars.ContextVar[Identity] = contextvars.ContextVar(
    "mirrorline_caller", default=ANONYMOUS)

Context = Any  # grpc.aio.ServicerContext; typed loosely to wrap generic handlers
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


def caller() -> Identity:
    """Who is calling the current handler."""
    return _caller.get()


def _bearer(context: Context) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key.lower() == "authorization" and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer" and token:
                return token.strip()
    return None


def _common_name(context: Context) -> str | None:
    auth = context.auth_context() or {}
    names = list(auth.get("x509_common_name") or [])
    return names[0].decode(errors="replace") if names else None


def rewrap(handler: Handler,
           guard: Callable[[Any, Context], Awaitable[None]],
           after: Callable[[Any, Context, BaseException | None], Awaitable[None]] | None = None
           ) -> Handler:
    """The same handler, with `guard` run before it and `after` once it ended."""
    async def finish(request: Any, context: Context, error: BaseException | None) -> None:
        if after is not None:
            await after(request, context, error)

    if handler.unary_unary is not None:
        inner_uu = handler.unary_unary

        async def unary_unary(request: Any, context: Context) -> Any:
            await guard(request, context)
            try:
                result = inner_uu(request, context)
                reply = await result if inspect.isawaitable(result) else result
            except BaseException as exc:
                await finish(request, context, exc)
                raise
            await finish(request, context, None)
            return reply

        return grpc.unary_unary_rpc_method_handler(
            unary_unary, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)

    if handler.unary_stream is not None:
        inner_us = handler.unary_stream

        async def unary_stream(request: Any, context: Context) -> AsyncIterator[Any]:
            await guard(request, context)
            result = inner_us(request, context)
            if inspect.isasyncgen(result):
                async for item in result:
                    yield item
            elif inspect.isawaitable(result):
                await result

        return grpc.unary_stream_rpc_method_handler(
            unary_stream, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)

    inner_ss = handler.stream_stream or handler.stream_unary
    streaming_reply = handler.stream_stream is not None

    async def streaming(requests: Any, context: Context) -> AsyncIterator[Any]:
        await guard(None, context)
        assert inner_ss is not None
        result = inner_ss(requests, context)
        if inspect.isasyncgen(result):
            async for item in result:
                yield item
        elif inspect.isawaitable(result):
            reply = await result
            if not streaming_reply and reply is not None:
                yield reply

    if streaming_reply:
        return grpc.stream_stream_rpc_method_handler(
            streaming, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)

    async def stream_unary(requests: Any, context: Context) -> Any:
        async for reply in streaming(requests, context):
            return reply
        return None

    return grpc.stream_unary_rpc_method_handler(
        stream_unary, request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer)


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Identify, authorise and bound every call (see the module docstring)."""

    def __init__(self, service: str, identities: Identities | None) -> None:
        self._service = service
        self._identities = identities

    def _identify(self, context: Context) -> Identity | None:
        if self._identities is None:
            return ANONYMOUS
        token = _bearer(context)
        if token is not None:
            return self._identities.by_token(token)
        name = _common_name(context)
        return None if name is None else self._identities.by_certificate(name)

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
            handler_call_details: grpc.HandlerCallDetails) -> Handler | None:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or is_public(method):
            return handler

        async def guard(request: Any, context: Context) -> None:
            identity = self._identify(context)
            if identity is None:
                self._refused(method, None, "no valid credentials")
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, (
                    f"{method} needs credentials: a bearer token from the deployment's tokens "
                    "file, or a client certificate it lists"))
            assert identity is not None
            if self._identities is not None:
                need = required_role(method)
                if need is None:
                    self._refused(method, identity, "no role is defined for it")
                    await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                        f"{method} is not open to anyone (no role defined)")
                assert need is not None
                if not allows(identity.role, need):
                    self._refused(method, identity, f"needs role {need.value}")
                    await context.abort(grpc.StatusCode.PERMISSION_DENIED, (
                        f"{method} needs role {need.value}; {identity.name} has role "
                        f"{identity.role.value}"))
            if isinstance(request, Message):
                problem = oversized(request)
                if problem is not None:
                    self._refused(method, identity, f"request too large ({problem})")
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
            _caller.set(identity)

        return rewrap(handler, guard)

    def _refused(self, method: str, identity: Identity | None, why: str) -> None:
        who = "an unauthenticated caller" if identity is None else \
            f"{identity.name} ({identity.role.value}, by {identity.how})"
        log.warning("%s: refused %s from %s: %s", self._service, method, who, why)
