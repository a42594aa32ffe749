"""The audit trail: every state-changing Admin call, appended to the control log.

Recorded after the call ended, with its outcome, so a refused pause is as visible as a
successful delete. The entry names the caller (`mirrorline.grpcauth.caller`), the RPC, the
flow and the request's fields with secrets masked (`mirrorline.core.audit`). Only the
leader records (a standby's answer is a redirect and changed nothing); an audit record
changes no state, and one that cannot be written is logged, never fails the call.
Calls refused before they reached the handler (no credentials, wrong role) are logged by
the authentication interceptor.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import grpc

from mirrorline.core import audit
from mirrorline.core.control import ControlState, Outcome
from mirrorline.core.roles import MUTATING
from mirrorline.grpcauth import Handler, caller, rewrap
from mirrorline.v1 import audit_pb2, control_pb2

log = logging.getLogger(__name__)

#: Most entries one History call returns.
MAX_HISTORY = 10_000


class AuditedController(Protocol):
    controller_id: str

    @property
    def is_leader(self) -> bool: ...

    @property
    def state(self) -> ControlState: ...

    async def append(self, record: control_pb2.ControlRecord) -> tuple[int, Outcome]: ...


def _outcome(context: Any, error: BaseException | None) -> tuple[str, str]:
    code = None
    try:
        code = context.code()
    except Exception:  # older grpc: no code() on the aio context
        code = None
    details = ""
    try:
        details = context.details() or ""
    except Exception:
        details = ""
    if error is None and code in (None, grpc.StatusCode.OK, 0):
        return "OK", ""
    name = code.name if isinstance(code, grpc.StatusCode) else (
        "UNKNOWN" if error is None or not isinstance(error, grpc.aio.AbortError) else "ABORTED")
    if isinstance(details, bytes):
        details = details.decode(errors="replace")
    return name, str(details)


class AuditInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, controller: AuditedController) -> None:
        self._c = controller

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
            handler_call_details: grpc.HandlerCallDetails) -> Handler | None:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or method not in MUTATING:
            return handler

        async def nothing(request: Any, context: Any) -> None:
            return None

        async def after(request: Any, context: Any, error: BaseException | None) -> None:
            await self._record(method.rsplit("/", 1)[-1], request, context, error)

        return rewrap(handler, nothing, after)

    async def _record(self, rpc: str, request: Any, context: Any,
                      error: BaseException | None) -> None:
        if not self._c.is_leader:
            return
        outcome, detail = _outcome(context, error)
        if outcome == "UNAVAILABLE":  # not the leader after all: nothing changed here
            return
        who = caller()
        entry = audit_pb2.AuditEntry(
            timestamp_ms=int(time.time() * 1000), identity=who.name, role=who.role.value,
            rpc=rpc, flow=audit.flow_of(request), arguments=audit.arguments(request),
            outcome=outcome, detail=detail[:1000])
        try:
            await self._c.append(control_pb2.ControlRecord(
                epoch=self._c.state.epoch, controller_id=self._c.controller_id, audit=entry))
        except Exception as exc:  # the call itself already ended; say so, don't fail it
            log.error("audit entry for %s by %s not recorded: %r", rpc, who.name, exc)
        log.info("audit: %s %s %s by %s (%s)", rpc, entry.flow or "-", outcome, who.name,
                 who.role.value)


def history(state: ControlState, flow: str, limit: int) -> audit_pb2.HistoryResponse:
    entries = [e for e in state.audit if not flow or e.flow == flow]
    return audit_pb2.HistoryResponse(entries=entries[-limit:])
