"""The controller process: control log, election, reconciliation, Admin and Coordinator APIs.

Every controller replays the control log and serves gRPC; only the elected leader
appends, reconciles and answers the APIs (the others answer UNAVAILABLE with the
leader's address). On its first term ever, the leader seeds the log from the properties
file; afterwards the log is the truth, and differences with the file are reported at
start rather than applied.

The home cluster may be unreachable when the controller starts, or go away later: the
controller then retries with backoff, says why in one line per attempt, and reports
NOT_SERVING until it can read and write its control log again. Health is SERVING only
while the home cluster answers and leadership is steady (not changing hands every few
seconds); a standby is healthy -- it is ready to take over -- and says it is a standby to
every Admin call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

import grpc
from aiokafka.errors import KafkaError
from opentelemetry.metrics import Meter

from mirrorline.controller import status
from mirrorline.controller.admin import AdminServicer
from mirrorline.controller.audit import AuditInterceptor
from mirrorline.controller.discovery import Discoveries
from mirrorline.controller.election import Election
from mirrorline.controller.lag import UnownedLag
from mirrorline.controller.reconciler import Reconciler
from mirrorline.controller.workers import CoordinatorServicer, WorkerRegistry
from mirrorline.controlplane.home import control_topics, home_clients
from mirrorline.controlplane.lease import LeaseBoard
from mirrorline.controlplane.log import ControlLog
from mirrorline.core.assignment import PartitionKey
from mirrorline.core.control import ControlState, Outcome
from mirrorline.core.errors import one_line
from mirrorline.core.flowdefs import Definition, differences, file_definitions
from mirrorline.core.leases import DEFAULT_LEASE_MS
from mirrorline.core.settings import FlowSettings, MirrorSettings
from mirrorline.grpcserver import ServiceServer
from mirrorline.kafka.admin import ClusterAdmin
from mirrorline.kafka.causes import explain
from mirrorline.kafka.clients import admin_kwargs
from mirrorline.kafka.health import ClusterProbe
from mirrorline.runtime import stop_within
from mirrorline.servicehost import ServiceHost
from mirrorline.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    control_pb2,
    coordinator_pb2,
    coordinator_pb2_grpc,
)

log = logging.getLogger(__name__)

#: Trailing metadata of an UNAVAILABLE answer that will soon be a real one (a leader
#: taking office, or no leader elected yet): how long a client should wait before asking
#: the same controller again. `mirrorline admin` does, within its call deadline.
RETRY_AFTER_MS_KEY = "retry-after-ms"
RETRY_AFTER_MS = 500

#: Leadership changes within `FLAP_WINDOW_S` that make the controller report NOT_SERVING.
FLAP_CHANGES = 4
FLAP_WINDOW_S = 60.0


class ControllerService(ServiceHost):
    """Election, reconciliation and the Admin and Coordinator APIs, on the service host."""

    kind = "controller"
    grpc_grace_s = 0.5

    def __init__(self, deployment: MirrorSettings, *, controller_id: str,
                 targets: Sequence[str] | None = None, grpc_host: str = "127.0.0.1",
                 grpc_port: int = 0, advertise: str | None = None,
                 metrics_host: str = "127.0.0.1", metrics_port: int | None = 0,
                 lease_ms: int = DEFAULT_LEASE_MS, worker_lease_ms: int = DEFAULT_LEASE_MS
                 ) -> None:
        super().__init__(deployment, instance_id=controller_id, targets=targets,
                         grpc_host=grpc_host, grpc_port=grpc_port, metrics_host=metrics_host,
                         metrics_port=metrics_port, advertise=advertise, joins=True,
                         interceptors=[AuditInterceptor(self)])
        self.deployment = deployment
        self.controller_id = controller_id
        self._lease_ms = lease_ms
        self.registry = WorkerRegistry(worker_lease_ms)
        admins = {alias: dict(admin_kwargs(dict(c.connection))[0],
                              client_id=f"controller-{controller_id}|{alias}")
                  for alias, c in deployment.clusters.items()}
        self._wake = asyncio.Event()
        self.discoveries = Discoveries(admins, on_refreshed=self._wake.set)
        self._reconciler = Reconciler(deployment, self.discoveries, self.registry)
        #: The lag of partitions no live owner reports, measured while leading.
        self.lag = UnownedLag(f"controller-{controller_id}")
        #: Why the last reconciliation round failed (a bug); None when it did not.
        self._reconcile_error: str | None = None
        self._leases: LeaseBoard | None = None
        self._election: Election | None = None
        #: Why the control log cannot be used yet (None once connected).
        self.connect_error: str | None = "connecting to the home cluster"
        self._probe: ClusterProbe | None = None
        self._changes: list[float] = []  # monotonic times of leadership changes
        self._grpc_reason = ""
        #: The epoch whose leader has finished taking office (seeding the log on the first
        #: term); until then this controller answers the APIs as a non-leader.
        self._ready_epoch: int | None = None

    # -- the context the APIs need ------------------------------------------------------
    @property
    def state(self) -> ControlState:
        """The replayed control log (empty until the home cluster first answered)."""
        return self._control.state if self._control is not None else _EMPTY

    @property
    def healthy(self) -> tuple[bool, str]:
        """(SERVING?, why not) -- what the health probe reports."""
        if self.connect_error is not None:
            return False, self.connect_error
        if self._probe is not None and self._probe.reachable is False:
            return False, self._probe.error or f"home cluster {self.home!r} unreachable"
        if self._control is not None and self._control.regressed is not None:
            return False, self._control.regressed
        if self._control is not None and self._control.failed is not None:
            return False, self._control.failed
        if self._reconcile_error is not None:
            return False, f"reconciliation failed: {self._reconcile_error}"
        now = time.monotonic()
        recent = [t for t in self._changes if now - t < FLAP_WINDOW_S]
        if len(recent) >= FLAP_CHANGES:
            return False, f"leadership changed {len(recent)} times in {FLAP_WINDOW_S:.0f}s"
        return True, ""

    @property
    def is_leader(self) -> bool:
        """Elected and in office: a fresh leader first seeds the log from the file, and
        until that is written nobody may read or change flows through it (a ListFlows that
        answered in between showed no flows, and a CreateFlow could overtake the seed)."""
        return (self._election is not None and self._election.is_leader
                and self._ready_epoch == self._election.leading_epoch)

    async def append(self, record: control_pb2.ControlRecord) -> tuple[int, Outcome]:
        assert self._control is not None
        result = await self._control.append(record)
        self._wake.set()
        return result

    async def require_leader(self, context: grpc.aio.ServicerContext[Any, Any]) -> int:
        if self.is_leader:
            return self.state.epoch
        state = self.state
        if self._election is not None and self._election.is_leader:
            # Elected but still seeding the log: no redirect (it would point back here).
            context.set_trailing_metadata(((RETRY_AFTER_MS_KEY, str(RETRY_AFTER_MS)),))
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"controller {self.controller_id} was just elected and is "
                                "taking office; retry shortly")
        address = state.leader_address or ""
        if address:
            context.set_trailing_metadata((("leader-address", address),))
        elif not state.leader_id and self.connect_error is None:
            context.set_trailing_metadata(((RETRY_AFTER_MS_KEY, str(RETRY_AFTER_MS)),))
        if self.connect_error is not None:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"controller {self.controller_id} is not ready: "
                                f"{self.connect_error}")
        leader = (f"the leader is {state.leader_id} at {address}" if state.leader_id
                  else "no controller leads yet; retry shortly")
        await context.abort(grpc.StatusCode.UNAVAILABLE,
                            f"controller {self.controller_id} is a standby (it does not "
                            f"lead); {leader}")
        raise AssertionError("unreachable")

    # -- lifecycle ----------------------------------------------------------------------
    def register_metrics(self, meter: Meter) -> None:
        self._register_metrics(meter)

    def add_servicers(self, server: ServiceServer) -> None:
        server.add(admin_pb2_grpc.add_AdminServicer_to_server, AdminServicer(self),
                   [admin_pb2.DESCRIPTOR.services_by_name["Admin"].full_name])
        server.add(coordinator_pb2_grpc.add_CoordinatorServicer_to_server,
                   CoordinatorServicer(self.registry, leader=self),
                   [coordinator_pb2.DESCRIPTOR.services_by_name["Coordinator"].full_name])

    async def started(self) -> None:
        _, _, admin = home_clients(self.deployment, self.home, self.control_client_id)
        self._probe = ClusterProbe(self.home, dict(admin, client_id=f"controller-"
                                                   f"{self.controller_id}|probe"))
        self._probe.start()
        self.spawn(self.registry.watch(), "lease clock")

    def report_home(self, reason: str | None) -> None:
        if reason is not None:  # None once joined: `on_joined` clears it
            self.connect_error = reason

    async def on_joined(self) -> None:
        """The control log and the lease are open: lead or stand by."""
        assert self._control is not None and self._leases is not None
        self.connect_error = None
        self._report_file_differences()
        self._election = Election(self._control, self._leases, controller_id=self.controller_id,
                                  address=self.address, lease_ms=self._lease_ms,
                                  on_change=self._leadership_changed)
        self.spawn(self._election.run(), "election")
        self.spawn(self._reconcile_loop(), "reconcile")
        self.spawn(self.lag.run(self._unreported, self._tracked), "lag of unassigned partitions")
        log.info("controller %s on %s (home cluster %r, control log at offset %d)",
                 self.controller_id, self.address, self.home, self.state.applied_offset)

    async def open_home(self) -> None:
        consumer, producer, admin = home_clients(self.deployment, self.home,
                                                 self.control_client_id)
        rf = min(f.offset_storage_replication_factor for f in self.deployment.flows.values()) \
            if self.deployment.flows else -1
        control_topic, lease_topic = control_topics(self.deployment)

        async def ensure_topics() -> None:
            async with ClusterAdmin(self.home, admin) as home_admin:
                await ControlLog.ensure_topic(home_admin, rf, control_topic)
                await LeaseBoard.ensure_topic(home_admin, rf, lease_topic)

        await ensure_topics()
        self._control = ControlLog(consumer_kwargs=consumer, producer_kwargs=producer,
                                   topic=control_topic, ensure_topic=ensure_topics)
        await self._control.start()
        self._control.listen(lambda *_: self._wake.set())
        self._leases = LeaseBoard(consumer_kwargs=consumer, producer_kwargs=producer,
                                  topic=lease_topic)
        await self._leases.start()

    async def close_home(self) -> None:
        closers = [c for c in (self._leases, self._control) if c is not None]
        self._leases = self._control = None
        for closer in closers:
            await stop_within(closer.stop(), 1.0, "closing the control log")

    def evaluate_health(self) -> bool:
        serving, why = self.healthy
        if not serving and why and self._grpc_reason != why:
            log.info("health NOT_SERVING: %s", why)
        self._grpc_reason = why
        return serving

    def serving(self) -> bool:
        return self.healthy[0]

    async def stop_parts(self) -> None:
        if self._election is not None:
            await stop_within(self._election.resign(), 1.0, "resigning the lease")
        if self._probe is not None:
            await self._probe.stop()

    async def stop_rest(self) -> None:
        await stop_within(self.discoveries.close(), 0.5, "closing admin clients")
        await self.registry.close()

    # -- leadership ---------------------------------------------------------------------
    async def _leadership_changed(self, leading: bool) -> None:
        now = time.monotonic()
        self._changes = [t for t in self._changes if now - t < FLAP_WINDOW_S] + [now]
        self._ready_epoch = None
        self.registry.reset()
        self._reconciler.reset()
        if leading:
            await self._take_office()
        self._wake.set()

    async def _take_office(self) -> None:
        """Seed the log on the first term ever, then serve as leader (retried by the
        reconcile loop if the seeding failed)."""
        assert self._election is not None
        epoch = self._election.leading_epoch
        if not self.state.seeded:
            await self._seed()
        self._ready_epoch = epoch

    async def _seed(self) -> None:
        epoch = self.state.epoch
        for name, definition in file_definitions(self.deployment).items():
            if name in self.state.flows:
                continue
            await self.append(control_pb2.ControlRecord(
                epoch=epoch, controller_id=self.controller_id,
                flow_created=control_pb2.FlowCreated(spec=_spec(definition))))
        await self.append(control_pb2.ControlRecord(
            epoch=epoch, controller_id=self.controller_id,
            config_seeded=control_pb2.ConfigSeeded(source=self.deployment.source_path or "")))
        log.info("seeded the control log from %s (%d flows)", self.deployment.source_path,
                 len(self.state.flows))

    def _report_file_differences(self) -> None:
        if not self.state.seeded:
            return
        current = {n: Definition(r.source, r.target, r.properties)
                   for n, r in self.state.flows.items()}
        found = differences(file_definitions(self.deployment), current)
        for line in found:
            log.warning("the control log is the truth; %s", line)
        if found:
            log.warning("to apply the file's flows deliberately: mirrorline admin flows import %s",
                        self.deployment.source_path or "FILE")

    async def _reconcile_loop(self) -> None:
        while True:
            self._wake.clear()
            if (self._election is not None and self._election.is_leader
                    and not self.is_leader):
                try:
                    await self._take_office()
                except Exception as exc:
                    log.warning("taking office failed (%r); retrying", exc)
            if self.is_leader and self._election is not None:
                try:
                    if not await self._reconciler.step(self.state, self.state.epoch,
                                                       self.controller_id, self.append):
                        log.warning("an append was stale: this controller was deposed")
                except (KafkaError, OSError, TimeoutError) as exc:  # a cluster does not answer
                    log.warning("reconciliation failed: %s; retrying", explain(exc))
                except Exception as exc:  # a bug: say it once, retry next round
                    reason = one_line(exc)
                    if reason != self._reconcile_error:
                        log.error("reconciliation failed: %s; retrying every round", reason)
                        log.debug("reconciliation failed", exc_info=True)
                    self._reconcile_error = reason
                else:
                    self._reconcile_error = None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 1.0)

    def _unreported(self) -> dict[PartitionKey, str]:
        """Partitions of the flows run here that no live owner reports (the leader
        measures them)."""
        if not self.is_leader:
            return {}
        return status.unreported(self.state, self.registry, self.discoveries.desired())

    def _tracked(self) -> dict[str, FlowSettings]:
        return {name: f.settings for name, f in self.discoveries.flows.items()}

    def _register_metrics(self, meter: Meter) -> None:
        from opentelemetry.metrics import CallbackOptions, Observation

        def observe(read: Any) -> Any:
            def callback(_: CallbackOptions) -> list[Observation]:
                if self._control is None:
                    return []
                return [Observation(float(read()), {"controller": self.controller_id})]
            return callback

        meter.create_observable_gauge("controller-leader", callbacks=[observe(
            lambda: 1 if self.is_leader else 0)], description="1 while this controller leads")
        meter.create_observable_gauge("controller-epoch", callbacks=[observe(
            lambda: self.state.epoch)])
        meter.create_observable_gauge("flows", callbacks=[observe(
            lambda: len(self.state.flows))])
        meter.create_observable_gauge("assigned-partitions", callbacks=[observe(
            lambda: len(self.state.owners))])
        meter.create_observable_gauge("live-workers", callbacks=[observe(
            lambda: len(self.registry.live()))])

        # What `admin status` says, as numbers: only the leader knows it (a standby
        # reports nothing, so a dashboard's sum is the leader's).
        def counts() -> tuple[dict[str, int], dict[tuple[str, str], int]] | None:
            if self._control is None or not self.is_leader:
                return None
            return status.state_counts(status.report(
                self.state, self.registry, self.discoveries,
                controller_id=self.controller_id, measured=self.lag))

        def flow_states(_: CallbackOptions) -> list[Observation]:
            found = counts()
            return [] if found is None else [
                Observation(n, {"controller": self.controller_id, "state": s})
                for s, n in found[0].items()]

        def partition_states(_: CallbackOptions) -> list[Observation]:
            found = counts()
            out = []
            for (flow, s), n in (found[1] if found is not None else {}).items():
                record = self.state.flows.get(flow)
                if record is not None:
                    out.append(Observation(n, {"source": record.source,
                                               "target": record.target, "state": s}))
            return out

        meter.create_observable_gauge("flows-by-state", callbacks=[flow_states],
                                      description="flows per state, as admin status shows "
                                                  "them (leader only)")
        meter.create_observable_gauge("partitions-by-state", callbacks=[partition_states],
                                      description="partitions per flow and state (running, "
                                                  "paused, error, unassigned, starting; "
                                                  "leader only)")
        self.lag.register_metrics(meter)


_EMPTY = ControlState()


def _spec(definition: Definition) -> Any:
    from mirrorline.v1 import flows_pb2

    return flows_pb2.FlowSpec(source=definition.source, target=definition.target,
                              properties=dict(definition.properties))
