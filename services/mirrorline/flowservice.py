"""The skeleton of a service that runs one runner per flow: checkpointer, config sync, heartbeat.

Such a service takes its flows from the properties file, or with `--managed` (as `mirrorline
run` starts it) from the control log, followed live; it serves gRPC through `ServiceServer`
with health NOT_SERVING until it can do its work, exports metrics through the telemetry
module and, when managed, announces its address to the leading controller so that the
Admin API can forward to it. Telemetry, gRPC, joining, announcing and the bounded stop are
the host's (`mirrorline.servicehost.ServiceHost`, shared by every service); what is here
is keeping one runner per flow. A service says only what is its own: its runner, its gRPC
servicer, its metrics and when it is healthy.

A service package never imports another's, which is why this is not in either of them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import grpc

from mirrorline.controlplane.log import ControlLog
from mirrorline.core.errors import ConfigError, one_line
from mirrorline.core.flowdefs import Definition, flow_settings
from mirrorline.core.settings import FlowSettings, MirrorSettings
from mirrorline.runtime import stop_within
from mirrorline.servicehost import ServiceHost

__all__ = ["FlowRunnerLike", "FlowService"]

#: How often the control log is re-read for changed flows when no change was signalled.
FOLLOW_S = 5.0


class FlowRunnerLike(Protocol):
    """What the skeleton needs of a service's per-flow runner."""

    flow: FlowSettings

    def start(self) -> None: ...

    async def stop(self) -> None: ...


R = TypeVar("R", bound=FlowRunnerLike)


class FlowService(ServiceHost, Generic[R]):
    """Flows (file or control log) on the service host.

    A subclass sets `kind` and the texts below, and implements `new_runner`,
    `add_servicers` and `serving`; `register_metrics`, `check_health` and `stop_more`
    are optional.
    """

    announces = True
    #: The configuration error when the file enables no flow for it.
    nothing_to_do: ClassVar[str]
    #: Completes "flow X cannot be ... here" when the control log names a flow it cannot run.
    verb: ClassVar[str]
    #: Managed: run only the control log's flows that target the `--clusters` aliases.
    follow_targets_only: ClassVar[bool] = True
    #: Standalone with no enabled flow: a configuration error (`nothing_to_do`). False for
    #: a service that has work besides its flows (the heartbeat service's heartbeats and
    #: topology).
    flows_required: ClassVar[bool] = True

    def __init__(self, settings: MirrorSettings, *, instance_id: str | None = None,
                 targets: Sequence[str] | None = None, grpc_host: str = "127.0.0.1",
                 grpc_port: int = 0, metrics_host: str = "127.0.0.1",
                 metrics_port: int | None = 0, managed: bool = False,
                 advertise: str | None = None) -> None:
        super().__init__(settings, instance_id=self.kind if instance_id is None
                         else instance_id, targets=targets, grpc_host=grpc_host,
                         grpc_port=grpc_port, metrics_host=metrics_host,
                         metrics_port=metrics_port, advertise=advertise, joins=managed)
        self._managed = managed
        self.runners: dict[str, R] = {}
        #: The control log's definition each runner was made from (None: from the file).
        self._definitions: dict[str, Definition | None] = {}
        self._changed = asyncio.Event()
        #: Flows of the control log this service cannot run: name -> (the definition
        #: tried, why). Said once in the log; an RPC about such a flow answers with it.
        self.rejected: dict[str, tuple[Definition, str]] = {}
        #: Why following the control log stopped (health is NOT_SERVING); None while it runs.
        self.follow_error: str | None = None
        self._follow_task: asyncio.Task[None] | None = None
        self._said_unhealthy: str | None = None

    # -- what a service says of itself ----------------------------------------------------
    def new_runner(self, flow: FlowSettings) -> R:
        raise NotImplementedError

    def check_health(self) -> None:
        """Called before each health evaluation, e.g. to start probes for new flows."""

    async def stop_more(self) -> None:
        """Stop what the service started besides its runners (after the control log)."""

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def error(self) -> str | None:
        """Why the control log cannot be read (managed mode); None when it can."""
        return self.home_error

    @property
    def joined(self) -> bool:
        """Standalone, or managed with the control log read."""
        return not self._managed or self._control is not None

    async def require_runner(self, flow: str, context: grpc.aio.ServicerContext[Any, Any]
                             ) -> R:
        """The runner an RPC about `flow` goes to; otherwise the call is aborted with
        INVALID_ARGUMENT (no flow named) or NOT_FOUND (listing the flows run here)."""
        if not flow:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "flow: is required (e.g. 'primary->backup')")
        runner = self.runners.get(flow)
        if runner is None and flow in self.rejected:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"flow {flow} cannot be {self.verb} here: "
                                f"{self.rejected[flow][1]}")
        if runner is None:
            known = ", ".join(sorted(self.runners)) or "none"
            await context.abort(grpc.StatusCode.NOT_FOUND,
                                f"flow {flow} is not {self.verb} here (flows: {known})")
        assert runner is not None
        return runner

    async def check(self) -> None:
        if self.flows_required and not self._managed \
                and not self.settings.enabled_flows(self._targets):
            raise ConfigError(None, self.nothing_to_do, source=self.settings.source_path)

    async def started(self) -> None:
        if not self._managed:
            for flow in self.settings.enabled_flows(self._targets):
                self._add(flow.name, None, flow)
        self._log.info("%s %s: gRPC %s (%s)", self.kind, self.instance_id, self.address,
                       "flows from the control log" if self._managed
                       else "flows from the file")

    async def on_joined(self) -> None:
        """Managed mode: follow the control log (the host then announces this service)."""
        assert self._control is not None
        self._control.listen(lambda *_: self._changed.set())
        self._follow_task = self.spawn(self._follow(), "follow control log")

    async def stop_parts(self) -> None:
        await stop_within(asyncio.gather(*(r.stop() for r in self.runners.values()),
                                         return_exceptions=True), 1.2, "stopping the flows")

    async def stop_rest(self) -> None:
        await self.stop_more()

    # -- flows ----------------------------------------------------------------------------
    def _add(self, name: str, definition: Definition | None, flow: FlowSettings) -> None:
        runner = self.new_runner(flow)
        self.runners[name] = runner
        self._definitions[name] = definition
        runner.start()

    async def _follow(self) -> None:
        """Keep one runner per flow of the control log; a changed flow's runner is
        replaced. A flow that cannot be applied -- whatever the reason -- is that flow's
        error, said once; every other flow is still followed."""
        assert self._control is not None
        while True:
            self._changed.clear()
            try:
                await self._follow_once(self._control)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # one round failed: say so, keep following
                reason = one_line(exc)
                if reason != self.follow_error:
                    self._log.error("%s %s: following the control log failed: %s; "
                                    "retrying", self.kind, self.instance_id, reason)
                    self._log.debug("following the control log failed", exc_info=True)
                self.follow_error = reason
            else:
                if self.follow_error is not None:
                    self._log.info("%s %s: following the control log again", self.kind,
                                   self.instance_id)
                self.follow_error = None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), FOLLOW_S)

    async def _follow_once(self, control: ControlLog) -> None:
        only = self._targets if self.follow_targets_only else None
        wanted = {n: Definition(r.source, r.target, r.properties)
                  for n, r in control.state.flows.items()
                  if not only or r.target in only}
        for name in list(self.runners):
            if wanted.get(name) != self._definitions.get(name):
                runner = self.runners.pop(name)
                self._definitions.pop(name, None)
                try:
                    await runner.stop()
                except Exception as exc:
                    self._log.warning("flow %s: stopping its runner failed: %s", name,
                                      one_line(exc))
        for name in list(self.rejected):
            if wanted.get(name) != self.rejected[name][0]:
                del self.rejected[name]  # changed or gone: try it again
        for name, definition in wanted.items():
            if name in self.runners or name in self.rejected:
                continue
            try:
                self._add(name, definition, flow_settings(self.settings, definition))
            except Exception as exc:  # any failure is this flow's, never the follower's
                self.runners.pop(name, None)
                self._definitions.pop(name, None)
                reason = one_line(exc)
                self.rejected[name] = (definition, reason)
                self._log.error("flow %s cannot be %s here: %s", name, self.verb, reason)
                if not isinstance(exc, ConfigError):
                    self._log.debug("flow %s: applying its definition failed", name,
                                    exc_info=True)

    def stopped_following(self) -> str | None:
        """Why this managed service no longer follows the control log, or None."""
        if self.follow_error is not None:
            return f"following the control log failed: {self.follow_error}"
        if self._control is not None and self._control.failed is not None:
            return self._control.failed
        task = self._follow_task
        if task is not None and task.done() and not task.cancelled():
            exc = task.exception()
            return ("following the control log stopped"
                    + (f": {one_line(exc)}" if exc is not None else ""))
        return None

    def evaluate_health(self) -> bool:
        """SERVING while the service's work is healthy (`serving`; `joined` is the part
        every service shares) and the control log is followed; why not is said once (at
        ERROR) when following stopped."""
        try:
            self.check_health()
            stopped = self.stopped_following()
            serving = self.serving() and stopped is None
        except Exception as exc:
            stopped, serving = f"checking health failed: {one_line(exc)}", False
        if stopped != self._said_unhealthy:
            if stopped is not None:
                self._log.error("%s %s: NOT_SERVING: %s", self.kind, self.instance_id,
                                stopped)
            self._said_unhealthy = stopped
        return serving
