"""The base of the agents that own partitions: a replicator worker, a Spark executor.

Both replay the control log and do what it says for their own worker id: run the
partitions assigned to them, let go of those revoked. What they share is here once:

* following the log: one round (`act`) per change of the log (or every second), a failed
  round said once (`follow_failed`) and tried again, and `stopped_following` for health;
* which partitions are theirs (`mine`): none while fenced;
* a flow whose definition cannot run here (`build`): said once per definition, never the
  agent's failure, every other flow goes on;
* heartbeats and self-fencing by the clock (`mirrorline.controlplane.leaseholder`), with
  the control-log offset acted on and the partitions run (`owned`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from mirrorline.controlplane.leaseholder import LeaseHolder
from mirrorline.controlplane.log import ControlLog
from mirrorline.core.errors import ConfigError, one_line
from mirrorline.core.flowdefs import Definition, flow_settings
from mirrorline.core.settings import FlowSettings, MirrorSettings
from mirrorline.runtime import cancel_and_wait
from mirrorline.v1 import coordinator_pb2, flows_pb2

__all__ = ["PartitionAgent"]

K = TypeVar("K")
T = TypeVar("T")


class PartitionAgent:
    """Follows the control log for one worker id and heartbeats to the leader."""

    #: Who the agent is in its lease's messages ("worker", "executor").
    label: ClassVar[str]
    #: Wait before trying again a round of following that failed.
    retry_s: ClassVar[float] = 1.0

    def __init__(self, deployment: MirrorSettings, control: ControlLog, *, worker_id: str,
                 address: str) -> None:
        self.deployment = deployment
        self.control = control
        self.worker_id = worker_id
        self.address = address
        #: Flows of the log that cannot run here: name -> why.
        self.broken: dict[str, str] = {}
        #: The definition each broken flow was refused with (said once per definition).
        self._refused: dict[str, Definition] = {}
        #: Why the last round of following the log failed; None when it did not.
        self.follow_error: str | None = None
        #: The control-log offset acted on (heartbeats carry it).
        self.acted_offset = -1
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._started_ms = int(time.time() * 1000)
        self._log = logging.getLogger(type(self).__module__)
        self.lease = LeaseHolder(f"{self.label} {worker_id}",
                                 leader_address=lambda: control.state.leader_address,
                                 beat=self._beat, on_fence=self.on_fence,
                                 on_unfence=self._changed.set)

    # -- what an agent says of itself ----------------------------------------------------
    async def act(self, offset: int) -> None:
        """One round: bring what runs here to what the log says; set `acted_offset` to
        `offset` once every hand-over it implies is done."""
        raise NotImplementedError

    def follow_failed(self, reason: str) -> None:
        """Say (once per reason) that a round failed."""
        self._log.error("%s %s: following the control log failed: %s; retrying",
                        self.label, self.worker_id, reason)

    def owned(self) -> list[flows_pb2.PartitionStatus]:
        """The partitions run here, as heartbeats and status report them."""
        raise NotImplementedError

    def beat_fields(self) -> dict[str, Any]:
        """What the agent's heartbeats carry besides the common fields."""
        return {}

    def on_fence(self) -> None:
        """No heartbeat succeeded for most of the lease: stop running partitions."""
        self._changed.set()

    async def start_more(self) -> None:
        """Start what must run before the log is followed."""

    async def stop_more(self) -> None:
        """Stop what runs here (after following stopped, before the lease)."""

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def fenced(self) -> bool:
        return self.lease.fenced

    @property
    def heartbeat_error(self) -> str | None:
        return self.lease.heartbeat_error

    async def start(self) -> None:
        await self.start_more()
        self.control.listen(lambda *_: self._changed.set())
        self._tasks.append(asyncio.create_task(self._follow(), name="follow control log"))
        self.lease.start()

    async def stop(self) -> None:
        await cancel_and_wait(*self._tasks)
        await self.stop_more()
        await self.lease.stop()

    def stopped_following(self) -> str | None:
        """Why this agent no longer follows the control log, or None."""
        if self.follow_error is not None:
            return f"following the control log failed: {self.follow_error}"
        if self.control.failed is not None:
            return self.control.failed
        for task in self._tasks:
            if task.done() and not task.cancelled():
                exc = task.exception()
                return ("following the control log stopped"
                        + (f": {one_line(exc)}" if exc is not None else ""))
        return None

    # -- following the log ---------------------------------------------------------------
    async def _follow(self) -> None:
        while True:
            offset = self.control.state.applied_offset
            try:
                await self.act(offset)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # one round failed: say so once, keep following
                reason = one_line(exc)
                if reason != self.follow_error:
                    self.follow_failed(reason)
                    self._log.debug("following the control log failed", exc_info=True)
                self.follow_error = reason
                await asyncio.sleep(self.retry_s)
                continue
            self.follow_error = None
            if self.control.state.applied_offset == offset:
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), 1.0)

    def mine(self, key: Callable[[str, int], K]) -> dict[str, dict[K, str]]:
        """Per flow, the partitions the log assigns here (`key(topic, partition)` -> the
        remote topic); none while fenced."""
        out: dict[str, dict[K, str]] = {}
        if not self.fenced:
            for owned, remote in self.control.state.owned_by(self.worker_id).items():
                out.setdefault(owned.flow, {})[key(owned.topic, owned.partition)] = remote
        return out

    def build(self, name: str, definition: Definition, broken: dict[str, str],
              make: Callable[[FlowSettings], T], prefix: str = "") -> T | None:
        """`make(settings of the flow)`, or None with the reason put in `broken` (said
        once per definition; any failure is the flow's, never the agent's)."""
        if self._refused.get(name) == definition and name in self.broken:
            broken[name] = self.broken[name]  # said already; not tried again
            return None
        try:
            return make(flow_settings(self.deployment, definition))
        except Exception as exc:
            broken[name] = one_line(exc)
            self._refused[name] = definition
            self._log.error("%sflow %s cannot run here: %s", prefix, name, broken[name])
            if not isinstance(exc, ConfigError):
                self._log.debug("flow %s: applying its definition failed", name,
                                exc_info=True)
            return None

    def settle_broken(self, broken: dict[str, str]) -> None:
        """The flows that cannot run here after a round; the others are tried afresh."""
        self.broken = broken
        for name in set(self._refused) - set(broken):
            del self._refused[name]

    # -- heartbeats ----------------------------------------------------------------------
    def _beat(self) -> coordinator_pb2.WorkerHeartbeat:
        return coordinator_pb2.WorkerHeartbeat(
            worker_id=self.worker_id, address=self.address, applied_offset=self.acted_offset,
            partitions=self.owned(), started_at_ms=self._started_ms, **self.beat_fields())
