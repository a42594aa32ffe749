"""One flow's canary and audit: the per-flow runner of the heartbeat service.

`FlowService` keeps one runner per flow (from the file, or from the control log followed
live) and starts and stops it as the flow comes and goes. What a flow's probes share with
other flows stays the service's: the canary sender of its source cluster (one per
source) and the faust app of its target cluster (one per target, holding the audit's and
the canary's tables). The runner owns only what is the flow's own: its canary
accounting, its canary reader and its two audit readers.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from mirrorline.core.canary import FlowCanary, PartitionState
from mirrorline.core.settings import FlowSettings
from mirrorline.heartbeat.audit_app import AuditApp
from mirrorline.heartbeat.audit_reader import AuditReader, FlowTopics
from mirrorline.heartbeat.canary import CanaryReader
from mirrorline.heartbeat.clients import cluster_kwargs
from mirrorline.runtime import cancel_and_wait

if TYPE_CHECKING:
    from mirrorline.heartbeat.service import HeartbeatService


class FlowProbe:
    """Starts the flow's canary and audit; `stop()` takes them away again."""

    def __init__(self, service: HeartbeatService, flow: FlowSettings) -> None:
        self.flow = flow
        self._s = service
        self.canary: FlowCanary | None = None
        self.canary_reader: CanaryReader | None = None
        self.audit_readers: list[AuditReader] = []
        #: Telling a running app of the flow, then starting the audit readers.
        self._joining: asyncio.Task[None] | None = None

    @property
    def audited(self) -> bool:
        return self.flow.audit.enabled

    def start(self) -> None:
        flow = self.flow
        if flow.canary.enabled:
            self._start_canary()
        if flow.audit.enabled:
            app = self._s.apps.get(flow.target)
            if app is not None:
                self._joining = asyncio.create_task(
                    self._join(app, int(time.time() * 1000)), name=f"audit of {flow.name}")
            # Otherwise the app's start (`HeartbeatService._run_audit`) adds the flow.
        if flow.canary.enabled or flow.audit.enabled:
            # The target's app holds the canary's table as well as the audit's.
            self._s.ensure_state_app(flow.target)

    async def _join(self, app: AuditApp, since_ms: int) -> None:
        await app.add_flow(self.flow.name, self.flow, since_ms)
        self.start_audit_readers(app)

    def _start_canary(self) -> None:
        flow, service = self.flow, self._s
        target = flow.target

        def states() -> dict[int, PartitionState]:
            app = service.apps.get(target)
            return app.canary_states(flow.name) if app is not None else {}

        # A canary topic created at this start is found by the replicator within one
        # topic refresh; its first canary could not have arrived sooner.
        now = int(time.time() * 1000)
        startup = int(flow.refresh_topics_interval_s * 1000) + flow.canary.latency_slo_ms
        canary = self.canary = FlowCanary(slo_ms=flow.canary.latency_slo_ms,
                                          window_ms=flow.audit.window_ms, states=states,
                                          started_ms=now, startup_ms=startup)
        service.canary_sender(flow).flows.append(canary)
        self.canary_reader = CanaryReader(
            flow.name, flow.target, flow.remote_topic(flow.canary_topic),
            canary, consumer_kwargs=cluster_kwargs(
                service.settings, flow.target, "consumer", f"heartbeat-{flow.name}-canary"),
            since_ms=now, app=lambda: service.apps.get(target),
            tracer=service.tracer())
        self.canary_reader.start()

    def start_audit_readers(self, app: AuditApp) -> None:
        """One reader per side, each reading its own cluster (the app is the target's).
        Once only: a flow that arrives while its target's app finishes starting is reached
        both by its own join and by the app's start."""
        if self.audit_readers:
            return
        topics = FlowTopics()
        flow = self.flow
        for side, alias in (("source", flow.source), ("target", flow.target)):
            reader = AuditReader(flow, side, app, topics,  # type: ignore[arg-type]
                                 cluster_kwargs(self._s.settings, alias, "consumer",
                                                f"heartbeat-{flow.name}-audit-{side}"))
            self.audit_readers.append(reader)
            reader.start()

    async def stop(self) -> None:
        if self._joining is not None:
            await cancel_and_wait(self._joining)
        if self.canary_reader is not None:
            await self.canary_reader.stop()
        for sender in self._s.senders.values():
            if self.canary in sender.flows:
                sender.flows.remove(self.canary)
        readers, self.audit_readers = self.audit_readers, []
        await asyncio.gather(*(r.stop() for r in readers), return_exceptions=True)
        app = self._s.apps.get(self.flow.target)
        if app is not None:
            app.flows.pop(self.flow.name, None)
