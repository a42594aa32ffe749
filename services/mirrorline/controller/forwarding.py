"""Forwarding Admin RPCs to the service that announced itself for them.

The controller answers offsets and failover through the checkpointer, drift through the
config-sync service and topology, canary and audit through the heartbeat service: each
announces its address (`mirrorline.controlplane.announce`). The rules are the same for all,
so they are here once: with no service announced the call fails UNAVAILABLE and names the
command that would start one; a forwarded call's failure reaches the client with the
service's own status code and message.
"""

from __future__ import annotations

from typing import Any

import grpc

from mirrorline.controller.workers import WorkerRegistry

__all__ = ["announced_channel", "forward"]

Context = grpc.aio.ServicerContext[Any, Any]


async def announced_channel(context: Context, registry: WorkerRegistry, service: str,
                            who: str) -> grpc.aio.Channel:
    """A channel to the `service` (`checkpointer`, `configsync`, `heartbeat`) that last
    announced itself; the call is aborted when none did. `who` names it for the message."""
    address = registry.service_address(service)
    if address is None:
        await context.abort(grpc.StatusCode.UNAVAILABLE,
                            f"no {who} has announced itself to this controller; "
                            f"is `mirrorline {service} --managed` running?")
    assert address is not None
    return registry.channel(address)


async def forward(context: Context, call: Any, request: Any, timeout: float) -> Any:
    """`call(request)`; its failure aborts this call with the same code and details.

    The forwarded call ends by the caller's deadline when that is sooner than `timeout`:
    the service stops working on an answer nobody waits for (and a cancelled caller
    cancels it too, this handler being cancelled)."""
    remaining = context.time_remaining()
    if remaining is not None:
        timeout = max(0.0, min(timeout, remaining))
    try:
        return await call(request, timeout=timeout)
    except grpc.aio.AioRpcError as exc:
        await context.abort(exc.code(), exc.details() or "")
