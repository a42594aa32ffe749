"""Leader election: claim the next epoch in the control log when the leader goes quiet.

Several controllers may run; one leads. A standby claims epoch N+1 when it has read no
lease renewal for the current epoch N for a whole lease period (or when no leader ever
existed). Claims race harmlessly: the first one in the log wins, the others are stale.
A leader that reads a newer claim, or cannot renew its lease for a lease period, stops
leading at once; its later appends would be ignored by every reader anyway.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from mirrorline.controlplane.lease import LeaseBoard
from mirrorline.controlplane.log import ControlLog
from mirrorline.core.control import Outcome
from mirrorline.v1 import control_pb2

log = logging.getLogger(__name__)


class Election:
    def __init__(self, control: ControlLog, leases: LeaseBoard, *, controller_id: str,
                 address: str, lease_ms: int,
                 on_change: Callable[[bool], Awaitable[None]]) -> None:
        self._control = control
        self._leases = leases
        self.controller_id = controller_id
        self.address = address
        self.lease_s = lease_ms / 1000.0
        self._on_change = on_change
        self.leading_epoch: int | None = None
        self._epoch_seen: tuple[int, float] = (control.state.epoch, time.monotonic())
        self._last_renewed = 0.0

    @property
    def is_leader(self) -> bool:
        return (self.leading_epoch is not None
                and self._control.state.epoch == self.leading_epoch
                and self._control.state.leader_id == self.controller_id)

    async def run(self) -> None:
        while True:
            try:
                await self._step()
            except Exception as exc:
                log.warning("election step failed: %r", exc)
            await asyncio.sleep(min(1.0, self.lease_s / 4))

    async def _step(self) -> None:
        state = self._control.state
        if self.leading_epoch is not None:
            if not self.is_leader:
                await self._step_down(f"epoch {state.epoch} was claimed by {state.leader_id}")
                return
            try:
                await self._leases.renew(control_pb2.LeaderLease(
                    epoch=self.leading_epoch, controller_id=self.controller_id,
                    address=self.address, lease_ms=int(self.lease_s * 1000)),
                    timeout=self.lease_s / 2)
                self._last_renewed = time.monotonic()
            except Exception as exc:
                if time.monotonic() - self._last_renewed > self.lease_s:
                    await self._step_down(f"could not renew the lease for {self.lease_s:.0f}s "
                                          f"({exc!r})")
            return
        if state.epoch < self._epoch_seen[0]:
            # The control log went backwards (see ControlLog): renewals read for the old
            # log's epochs say nothing about the new one's.
            self._leases.latest.clear()
        if state.epoch != self._epoch_seen[0]:
            self._epoch_seen = (state.epoch, time.monotonic())
        if state.epoch == 0 or self._leader_silent(state.epoch):
            await self._claim(state.epoch + 1)

    async def resign(self) -> None:
        """Stopping cleanly: tell standbys at once instead of making them wait a lease."""
        if not self.is_leader or self.leading_epoch is None:
            return
        try:
            await self._leases.renew(control_pb2.LeaderLease(
                epoch=self.leading_epoch, controller_id=self.controller_id,
                address=self.address, lease_ms=0), timeout=self.lease_s / 2)
            log.info("controller %s resigned epoch %d", self.controller_id, self.leading_epoch)
        except Exception as exc:
            log.warning("could not resign the lease (%r); standbys wait it out", exc)
        self.leading_epoch = None

    def _leader_silent(self, epoch: int) -> bool:
        if self._leases.resigned(epoch):
            return True
        renewed = self._leases.last_renewal(epoch)
        last_sign = max(renewed if renewed is not None else float("-inf"), self._epoch_seen[1])
        return time.monotonic() - last_sign > self.lease_s

    async def _claim(self, epoch: int) -> None:
        record = control_pb2.ControlRecord(
            epoch=epoch, controller_id=self.controller_id,
            leader_claimed=control_pb2.LeaderClaimed(address=self.address))
        offset, outcome = await self._control.append(record)
        if outcome is Outcome.APPLIED and self._control.state.leader_id == self.controller_id:
            self.leading_epoch = epoch
            self._last_renewed = time.monotonic()
            log.info("controller %s leads epoch %d (control log offset %d)", self.controller_id,
                     epoch, offset)
            await self._on_change(True)
        else:
            log.info("controller %s: claim for epoch %d lost (%s)", self.controller_id, epoch,
                     outcome.value)

    async def _step_down(self, why: str) -> None:
        log.warning("controller %s stops leading epoch %s: %s", self.controller_id,
                    self.leading_epoch, why)
        self.leading_epoch = None
        self._epoch_seen = (self._control.state.epoch, time.monotonic())
        await self._on_change(False)
