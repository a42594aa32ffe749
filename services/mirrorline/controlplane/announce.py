"""Telling the leading controller where a service serves, so the Admin API can forward.

Services that answer Admin RPCs on the controller's behalf (the checkpointer, the
heartbeat service) announce their address every few seconds to whichever controller the
control log names as leader; the controller forgets an address not renewed for a couple
of leases.
"""

from __future__ import annotations

import asyncio
import contextlib

import grpc

from mirrorline import grpcsecure
from mirrorline.controlplane.log import ControlLog
from mirrorline.v1 import coordinator_pb2, coordinator_pb2_grpc

ANNOUNCE_S = 3.0


async def announce_forever(control: ControlLog, service: str, instance_id: str,
                           address: str) -> None:
    channel: grpc.aio.Channel | None = None
    target: str | None = None
    try:
        while True:
            leader = control.state.leader_address
            if leader:
                if leader != target:
                    if channel is not None:
                        await channel.close()
                    channel, target = grpcsecure.channel(leader), leader
                assert channel is not None
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await coordinator_pb2_grpc.CoordinatorStub(channel).Announce(
                        coordinator_pb2.ServiceAnnouncement(
                            service=service, instance_id=instance_id, address=address),
                        timeout=2)
            await asyncio.sleep(ANNOUNCE_S)
    finally:
        if channel is not None:
            await channel.close()
