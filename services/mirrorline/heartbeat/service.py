"""The heartbeat process: MM2 heartbeats, topology, the canary and the audit.

Heartbeats go to every cluster pair of the properties file (as MM2's dedicated mode does).
Canary and audit cover the file's enabled flows, or with `--managed` the control log's
flows, followed live (paused ones included); a managed service also announces itself to
the leading controller, which then forwards the Topology, Canary and Audit RPCs of the
Admin API here. Start-up, the flows (file or control log), the announcement, the health
loop and the stop are `mirrorline.flowservice.FlowService`'s; a flow's canary and audit
are its runner (`heartbeat.flowprobe.FlowProbe`). Every part retries on its own with
backoff when a cluster does not answer, and says why in one line; nothing it reports is
OK while a cluster it needs is unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.metrics import Meter

from mirrorline.core.backoff import Backoff
from mirrorline.core.canary import FlowCanary
from mirrorline.core.policy import DefaultReplicationPolicy, ReplicationPolicy, make_policy
from mirrorline.core.settings import FlowSettings, MirrorSettings
from mirrorline.flowservice import FlowService
from mirrorline.grpcserver import ServiceServer
from mirrorline.heartbeat.api import HeartbeatAdminServicer
from mirrorline.heartbeat.audit_app import AuditApp, AuditTopics
from mirrorline.heartbeat.audit_reader import AuditReader
from mirrorline.heartbeat.canary import CanaryReader, CanarySender
from mirrorline.heartbeat.clients import cluster_kwargs
from mirrorline.heartbeat.emitter import HeartbeatEmitter
from mirrorline.heartbeat.flowprobe import FlowProbe
from mirrorline.heartbeat.metrics import register_metrics
from mirrorline.heartbeat.topology import TopologyWatcher
from mirrorline.heartbeat.verdicts import VerdictStore
from mirrorline.kafka.causes import unreachable
from mirrorline.kafka.reader import read_topic
from mirrorline.runtime import cancel_and_wait
from mirrorline.v1 import admin_pb2, admin_pb2_grpc, heartbeat_pb2, heartbeat_pb2_grpc

#: A path is stale when its newest heartbeat is older than this many emit intervals ...
STALE_INTERVALS = 5
#: ... and never sooner than this (replication of a heartbeat takes a moment).
STALE_MIN_MS = 10_000


class HeartbeatService(FlowService[FlowProbe]):
    kind = "heartbeat"
    verb = "probed"
    # Not an error to have no flow: `mirrorline run` starts this service for every
    # deployment, and one that switched all of it off still gets topology.
    flows_required = False
    #: Seconds `stop()` may take (see `mirrorline.runtime`): faust's stop and the end of
    #: its consumer thread need more than the default (`AuditApp.stop`).
    stop_budget_s = 7.0

    def __init__(self, settings: MirrorSettings, *, instance_id: str | None = None,
                 targets: Sequence[str] | None = None, grpc_host: str = "127.0.0.1",
                 grpc_port: int = 0, metrics_host: str = "127.0.0.1",
                 metrics_port: int | None = 0, managed: bool = False,
                 advertise: str | None = None) -> None:
        super().__init__(settings, instance_id=instance_id, targets=targets,
                         grpc_host=grpc_host, grpc_port=grpc_port, metrics_host=metrics_host,
                         metrics_port=metrics_port, managed=managed, advertise=advertise)
        self.started_ms = int(time.time() * 1000)
        pairs = [f for f in settings.flows.values() if f.emit_heartbeats_enabled
                 and (not self._targets or f.target in self._targets)]
        interval = max((p.emit_heartbeats_interval_s for p in pairs), default=1.0)
        self.stale_after_ms = max(STALE_MIN_MS, int(STALE_INTERVALS * interval * 1000))
        self.emitters = [self._emitter(t, [p for p in pairs if p.target == t])
                         for t in sorted({p.target for p in pairs})]
        self.watchers = {alias: TopologyWatcher(
            alias, cluster_kwargs(settings, alias, "consumer", f"heartbeat-{alias}-topology"),
            self._policy(alias), self.stale_after_ms) for alias in settings.clusters}
        #: One canary sender per source cluster, shared by the flows out of it.
        self.senders: dict[str, CanarySender] = {}
        #: Starting the state app of a target cluster (target alias -> its start).
        self._audit_tasks: dict[str, asyncio.Task[None]] = {}
        self.audit_topics = AuditTopics.for_deployment(settings.deployment)
        #: One faust app per target cluster (the audit's and the canary's tables).
        self.apps: dict[str, AuditApp] = {}
        self._pending_apps: dict[str, AuditApp] = {}
        #: Why the state app of a target cluster cannot start (target alias -> reason).
        self.state_errors: dict[str, str] = {}
        self.verdicts = VerdictStore()
        self._stopping = False

    def _policy(self, alias: str) -> ReplicationPolicy:
        for flow in self.settings.flows.values():
            if flow.target == alias:
                return make_policy(flow.policy)  # a cluster's, not one flow's
        return DefaultReplicationPolicy()

    def _emitter(self, target: str, pairs: list[FlowSettings]) -> HeartbeatEmitter:
        return HeartbeatEmitter(
            target, pairs,
            producer_kwargs=cluster_kwargs(self.settings, target, "producer",
                                           f"heartbeat-{target}-heartbeats"),
            admin_kwargs=cluster_kwargs(self.settings, target, "admin",
                                        f"heartbeat-{target}-admin"),
            topic=pairs[0].heartbeats_topic)

    # -- the flows, as the runners hold them ----------------------------------------------
    @property
    def flows(self) -> dict[str, FlowSettings]:
        return {name: runner.flow for name, runner in self.runners.items()}

    @property
    def canaries(self) -> dict[str, FlowCanary]:
        return {name: runner.canary for name, runner in self.runners.items()
                if runner.canary is not None}

    @property
    def canary_readers(self) -> dict[str, CanaryReader]:
        return {name: runner.canary_reader for name, runner in self.runners.items()
                if runner.canary_reader is not None}

    @property
    def audited(self) -> dict[str, FlowSettings]:
        return {name: runner.flow for name, runner in self.runners.items() if runner.audited}

    @property
    def audit_readers(self) -> list[AuditReader]:
        return [reader for runner in self.runners.values() for reader in runner.audit_readers]

    # -- what FlowService asks of the service ---------------------------------------------
    def new_runner(self, flow: FlowSettings) -> FlowProbe:
        return FlowProbe(self, flow)

    def add_servicers(self, server: ServiceServer) -> None:
        # Only Topology, Canary and Audit are implemented here; every other Admin RPC
        # answers UNIMPLEMENTED, as the generated base class does.
        servicer = HeartbeatAdminServicer(self)  # type: ignore[abstract]
        server.add(admin_pb2_grpc.add_AdminServicer_to_server, servicer,
                   [admin_pb2.DESCRIPTOR.services_by_name["Admin"].full_name])
        server.add(heartbeat_pb2_grpc.add_HeartbeatServicer_to_server, servicer,
                   [heartbeat_pb2.DESCRIPTOR.services_by_name["Heartbeat"].full_name])

    def register_metrics(self, meter: Meter) -> None:
        register_metrics(self, meter)

    def serving(self) -> bool:
        """SERVING while every part can work (`errors()` is empty)."""
        return not self.errors()

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        if not self.emitters and not self._managed \
                and not self.settings.enabled_flows(self._targets):
            self._log.info("heartbeat %s: heartbeats, canary and audit are all off; "
                           "serving topology only", self.instance_id)
        await super().start()
        for emitter in self.emitters:
            emitter.start()
        for watcher in self.watchers.values():
            watcher.start()
        self._log.info("heartbeat %s: %d heartbeat pairs, %d flows with canary, %d audited",
                       self.instance_id, sum(len(e.pairs) for e in self.emitters),
                       len(self.canaries), len(self.audited))

    async def stop(self) -> None:
        """As `FlowService.stop`, but first the state apps' starts are cancelled until
        they end (an app still starting is then stopped by `stop_more`, not by its
        cancelled start)."""
        self._stopping = True
        await self._grpc.set_serving(False)
        await cancel_and_wait(*self._audit_tasks.values())
        await super().stop()

    async def stop_more(self) -> None:
        """The emitters, watchers and canary senders, and every state app, started or
        starting -- after the flows' readers, which feed the apps."""
        parts: list[Any] = [*self.emitters, *self.watchers.values(), *self.senders.values(),
                            *self.apps.values(), *self._pending_apps.values()]
        await asyncio.gather(*(p.stop() for p in parts), return_exceptions=True)

    # -- what the flows share: canary senders and state apps ------------------------------
    def tracer(self) -> trace.Tracer:
        assert self.telemetry is not None
        return self.telemetry.tracer

    def canary_sender(self, flow: FlowSettings) -> CanarySender:
        """The sender of the flow's source cluster (started on first use), sending at
        least as often as the flow's canary asks."""
        sender = self.senders.get(flow.source)
        if sender is None:
            sender = self.senders[flow.source] = CanarySender(
                flow.source, flow.canary_topic, flow.canary.interval_ms,
                producer_kwargs=cluster_kwargs(self.settings, flow.source, "producer",
                                               f"heartbeat-{flow.source}-canary"),
                admin_kwargs=cluster_kwargs(self.settings, flow.source, "admin",
                                            f"heartbeat-{flow.source}-admin"),
                tracer=self.tracer(), replication_factor=flow.replication_factor)
            sender.start()
        sender.interval_ms = min(sender.interval_ms, flow.canary.interval_ms)
        return sender

    def ensure_state_app(self, target: str) -> None:
        """Start the state app of `target` unless it runs or is starting."""
        if target not in self.apps and target not in self._audit_tasks:
            self._audit_tasks[target] = asyncio.create_task(
                self._run_audit(target), name=f"state app of {target}")

    async def _run_audit(self, target: str) -> None:
        flows = {n: f for n, f in self.audited.items() if f.target == target}
        app_id = (f"mirrorline-{self.settings.deployment}-heartbeat-{target}"
                  if self.settings.deployment else f"mirrorline-heartbeat-{target}")
        backoff, attempt, said = Backoff(maximum=10.0), 0, ""
        while True:
            app = AuditApp(target, self.settings.clusters[target].bootstrap_servers, flows,
                           app_id=app_id, topics=self.audit_topics,
                           admin_kwargs=cluster_kwargs(self.settings, target, "admin",
                                                       f"heartbeat-{target}-audit-admin"),
                           on_verdict=self._verdict, since_ms=self.started_ms,
                           client_kwargs=cluster_kwargs(self.settings, target, "consumer",
                                                        f"heartbeat-{target}-audit"))
            # Until it is started (or given up), `stop()` stops it: a cancelled start must
            # not leave faust's consumer thread behind.
            self._pending_apps[target] = app
            try:
                await app.create_topics()
                self.verdicts.load(self.audit_topics.results, await read_topic(
                    cluster_kwargs(self.settings, target, "consumer",
                                   f"heartbeat-{target}-verdicts"),
                    self.audit_topics.results, partitions=1))
                await asyncio.wait_for(app.start(), 120)
                break
            except Exception as exc:
                if self._stopping:  # a cancellation some client turned into an error
                    return
                reason = unreachable(
                    target, exc,
                    dict(self.settings.clusters[target].connection).get("bootstrap.servers"),
                    role="target", purpose="for the audit")
                self.state_errors[target] = reason
                if reason != said:
                    self._log.warning("%s; retrying", reason)
                    said = reason
                with contextlib.suppress(Exception):
                    await app.stop()
                del self._pending_apps[target]
                await asyncio.sleep(backoff.delay(attempt))
                attempt += 1
        self.state_errors.pop(target, None)
        self.apps[target] = self._pending_apps.pop(target)
        # Flows added or removed while the app was starting.
        for name in set(app.flows) - set(self.audited):
            app.flows.pop(name)
        for name, flow in self.audited.items():
            if flow.target == target and name not in flows:
                await app.add_flow(name, flow)
        for runner in [r for r in self.runners.values() if r.audited
                       and r.flow.target == target]:
            runner.start_audit_readers(app)

    def _verdict(self, key: str, value: dict[str, object]) -> None:
        if value["verdict"] == "LATE":
            self._log.info("audit %s: %s partition %s window %s: LATE %s (%s)",
                           value["flow"], value["topic"], value["partition"],
                           value["window_start_ms"], value["count"], value["reason"])
        elif value["verdict"] != "OK":
            self._log.warning("audit %s: %s partition %s window %s: %s %s (%s)",
                              value["flow"], value["topic"], value["partition"],
                              value["window_start_ms"], value["verdict"],
                              value["count"] or "", value["reason"])
        self.verdicts.add(key, dict(value))

    def errors(self) -> list[str]:
        """Why the service cannot do all of its work now (empty: it can)."""
        found = [self.error] if self.error else []
        found += [e.error for e in self.emitters if e.error]
        found += [w.error for w in self.watchers.values() if w.error and w.error != "not read yet"]
        found += [s.error for s in self.senders.values() if s.error]
        found += [r.error for r in self.canary_readers.values() if r.error]
        found += list(self.state_errors.values())
        found += [f"the state of {t!r} is starting" for t in
                  set(self._audit_tasks) - set(self.apps) - set(self.state_errors)]
        found += [r.error for r in self.audit_readers if r.error]
        return found

    # -- views for the API and metrics --------------------------------------------------
    def canary_status(self, name: str) -> heartbeat_pb2.FlowCanaryStatus:
        flow, canary = self.flows[name], self.canaries[name]
        sender, reader = self.senders.get(flow.source), self.canary_readers.get(name)
        canary.unreachable = (sender.error if sender and sender.error
                              else reader.error if reader and reader.error
                              else self.state_errors.get(flow.target))
        status = canary.status(int(time.time() * 1000))

        def ms(value: float | None) -> float:
            return -1.0 if value is None else float(value)

        return heartbeat_pb2.FlowCanaryStatus(
            flow=name, health=status.health.value, reason=status.reason,
            p50_ms=ms(status.p50_ms), p99_ms=ms(status.p99_ms), max_ms=ms(status.max_ms),
            samples=status.samples, lost=status.lost, duplicated=status.duplicated,
            lost_total=status.lost_total, duplicated_total=status.duplicated_total,
            slo_ms=canary.slo_ms, window_ms=canary.window_ms,
            topic=reader.topic if reader else "", partitions=reader.partitions if reader else 0,
            by_partition=[heartbeat_pb2.CanaryPartition(
                partition=p, p50_ms=p50, p99_ms=p99, max_ms=top, samples=n)
                for p, (p50, p99, top, n) in canary.partition_latencies(
                    int(time.time() * 1000)).items()])

    def audit_totals(self, name: str) -> heartbeat_pb2.AuditTotals:
        by_verdict, missing, duplicated = self.verdicts.totals(name)
        app = self.apps.get(self.audited[name].target)
        errors = [r.error for r in self.audit_readers if r.flow.name == name and r.error]
        error = self.state_errors.get(self.audited[name].target) or (errors[0] if errors
                                                                     else "")
        if app is None and not error:
            error = "the audit is starting"
        return heartbeat_pb2.AuditTotals(
            flow=name, windows_by_verdict=dict(by_verdict), missing_records=missing,
            duplicated_records=duplicated, late_records=app.late(name) if app else 0,
            error=error)
