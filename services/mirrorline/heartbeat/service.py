"""The heartbeat process: MM2 heartbeats, topology, the canary and the audit.

Heartbeats go to every cluster pair of the properties file (as MM2's dedicated mode does).
Canary and audit cover the file's enabled flows, or with `--managed` the control log's
flows, followed live (paused ones included); a managed service also announces itself to
the leading controller, which then forwards the Topology, Canary and Audit RPCs of the
Admin API here. Every part retries on its own with backoff when a cluster
does not answer, and says why in one line; nothing it reports is OK while a cluster it
needs is unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace

from mirrorline.controlplane.announce import announce_forever
from mirrorline.controlplane.join import open_control_log
from mirrorline.controlplane.log import ControlLog
from mirrorline.core.backoff import Backoff
from mirrorline.core.canary import FlowCanary, PartitionState
from mirrorline.core.errors import ConfigError
from mirrorline.core.flowdefs import Definition, flow_settings
from mirrorline.core.policy import DefaultReplicationPolicy, ReplicationPolicy, make_policy
from mirrorline.core.settings import FlowSettings, MirrorSettings
from mirrorline.grpcserver import ServiceServer
from mirrorline.heartbeat.api import HeartbeatAdminServicer
from mirrorline.heartbeat.audit_app import AuditApp, AuditTopics
from mirrorline.heartbeat.audit_reader import AuditReader, FlowTopics
from mirrorline.heartbeat.canary import CanaryReader, CanarySender
from mirrorline.heartbeat.clients import cluster_kwargs
from mirrorline.heartbeat.emitter import HeartbeatEmitter
from mirrorline.heartbeat.metrics import register_metrics
from mirrorline.heartbeat.retrying import cancel_and_wait
from mirrorline.heartbeat.topology import TopologyWatcher
from mirrorline.heartbeat.verdicts import VerdictStore
from mirrorline.kafka.reader import read_topic
from mirrorline.telemetry import Telemetry, setup_telemetry
from mirrorline.v1 import admin_pb2, admin_pb2_grpc, heartbeat_pb2, heartbeat_pb2_grpc

log = logging.getLogger(__name__)

#: A path is stale when its newest heartbeat is older than this many emit intervals ...
STALE_INTERVALS = 5
#: ... and never sooner than this (replication of a heartbeat takes a moment).
STALE_MIN_MS = 10_000


class HeartbeatService:
    #: Seconds `stop()` may take (see `mirrorline.runtime`): faust's stop and the end of
    #: its consumer thread need more than the default (`AuditApp.stop`).
    stop_budget_s = 7.0

    def __init__(self, settings: MirrorSettings, *, instance_id: str = "heartbeat",
                 targets: Sequence[str] | None = None, grpc_host: str = "127.0.0.1",
                 grpc_port: int = 0, metrics_host: str = "127.0.0.1",
                 metrics_port: int | None = 0, managed: bool = False,
                 advertise: str | None = None) -> None:
        self.settings = settings
        self.instance_id = instance_id
        self._targets = tuple(targets) if targets else None
        self._grpc = ServiceServer(name=f"heartbeat {instance_id}", host=grpc_host,
                                   port=grpc_port)
        self._metrics = (metrics_host, metrics_port)
        self._managed = managed
        self._advertise = advertise
        self.telemetry: Telemetry | None = None
        self.started_ms = int(time.time() * 1000)
        pairs = [f for f in settings.flows.values() if f.emit_heartbeats_enabled
                 and (not self._targets or f.target in self._targets)]
        flows = settings.enabled_flows(self._targets)
        interval = max((p.emit_heartbeats_interval_s for p in pairs), default=1.0)
        self.stale_after_ms = max(STALE_MIN_MS, int(STALE_INTERVALS * interval * 1000))
        self.emitters = [self._emitter(t, [p for p in pairs if p.target == t])
                         for t in sorted({p.target for p in pairs})]
        self.watchers = {alias: TopologyWatcher(
            alias, cluster_kwargs(settings, alias, "consumer", f"heartbeat-{alias}-topology"),
            self._policy(alias), self.stale_after_ms) for alias in settings.clusters}
        # Managed: flows come from the control log (followed once it is read); otherwise
        # from the file. `_add_flow` starts their canary and audit.
        self.flows: dict[str, FlowSettings] = {} if managed else {f.name: f for f in flows}
        self._definitions: dict[str, Definition] = {}
        self.canaries: dict[str, FlowCanary] = {}
        self.senders: dict[str, CanarySender] = {}
        self.canary_readers: dict[str, CanaryReader] = {}
        self.audited: dict[str, FlowSettings] = {}
        self._audit_tasks: dict[str, asyncio.Task[None]] = {}
        self.audit_topics = AuditTopics.for_deployment(settings.deployment)
        self.apps: dict[str, AuditApp] = {}
        self._pending_apps: dict[str, AuditApp] = {}
        self.audit_readers: list[AuditReader] = []
        #: Why the state app of a target cluster cannot start (target alias -> reason).
        self.state_errors: dict[str, str] = {}
        self.verdicts = VerdictStore()
        self._control: ControlLog | None = None
        #: Why the control log cannot be read (managed mode; None once it is).
        self._home_error: str | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._changed = asyncio.Event()
        self._stopping = False

    def _policy(self, alias: str) -> ReplicationPolicy:
        for flow in self.settings.flows.values():
            if flow.target == alias:
                return make_policy(flow.policy)
        return DefaultReplicationPolicy()

    def _emitter(self, target: str, pairs: list[FlowSettings]) -> HeartbeatEmitter:
        return HeartbeatEmitter(
            target, pairs,
            producer_kwargs=cluster_kwargs(self.settings, target, "producer",
                                           f"heartbeat-{target}-heartbeats"),
            admin_kwargs=cluster_kwargs(self.settings, target, "admin",
                                        f"heartbeat-{target}-admin"),
            topic=make_policy(pairs[0].policy).heartbeats_topic())

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        if not self.emitters and not self.flows and not self._managed:
            # Not an error: `mirrorline run` starts this service for every deployment, and
            # one that switched all of it off still gets topology from the heartbeat topics.
            log.info("heartbeat %s: heartbeats, canary and audit are all off; serving "
                     "topology only", self.instance_id)
        self.telemetry = setup_telemetry("heartbeat", instance=self.instance_id,
                                         metrics_port=self._metrics[1],
                                         metrics_host=self._metrics[0])
        await self.telemetry.start()
        register_metrics(self, self.telemetry.meter)
        # Only Topology, Canary and Audit are implemented here; every other Admin RPC
        # answers UNIMPLEMENTED, as the generated base class does.
        servicer = HeartbeatAdminServicer(self)  # type: ignore[abstract]
        self._grpc.add(admin_pb2_grpc.add_AdminServicer_to_server, servicer,
                       [admin_pb2.DESCRIPTOR.services_by_name["Admin"].full_name])
        self._grpc.add(heartbeat_pb2_grpc.add_HeartbeatServicer_to_server, servicer,
                       [heartbeat_pb2.DESCRIPTOR.services_by_name["Heartbeat"].full_name])
        port = await self._grpc.start()
        address = self._advertise or f"127.0.0.1:{port}"
        for emitter in self.emitters:
            emitter.start()
        for watcher in self.watchers.values():
            watcher.start()
        for flow in list(self.flows.values()):
            await self._add_flow(flow)
        if self._managed:
            self._tasks.append(asyncio.create_task(self._announce(address), name="announce"))
        self._tasks.append(asyncio.create_task(self._health(), name="health"))
        log.info("heartbeat %s: gRPC %s; %d heartbeat pairs, %d flows with canary, %d "
                 "audited", self.instance_id, address, sum(len(e.pairs) for e in self.emitters),
                 len(self.canaries), len(self.audited))

    def _add_canary(self, flow: FlowSettings) -> None:
        target = flow.target

        def states() -> dict[int, PartitionState]:
            app = self.apps.get(target)
            return app.canary_states(flow.name) if app is not None else {}

        canary = self.canaries[flow.name] = FlowCanary(slo_ms=flow.canary.latency_slo_ms,
                                                       window_ms=flow.audit.window_ms,
                                                       states=states)
        policy = make_policy(flow.policy, flow.source)
        sender = self.senders.get(flow.source)
        if sender is None:
            sender = self.senders[flow.source] = CanarySender(
                flow.source, policy.canary_topic(), flow.canary.interval_ms,
                producer_kwargs=cluster_kwargs(self.settings, flow.source, "producer",
                                               f"heartbeat-{flow.source}-canary"),
                admin_kwargs=cluster_kwargs(self.settings, flow.source, "admin",
                                            f"heartbeat-{flow.source}-admin"),
                tracer=self._tracer(), replication_factor=flow.replication_factor)
            sender.start()
        sender.interval_ms = min(sender.interval_ms, flow.canary.interval_ms)
        sender.flows.append(canary)
        reader = self.canary_readers[flow.name] = CanaryReader(
            flow.name, flow.target, policy.format_remote_topic(flow.source,
                                                               policy.canary_topic()),
            canary, consumer_kwargs=cluster_kwargs(
                self.settings, flow.target, "consumer", f"heartbeat-{flow.name}-canary"),
            since_ms=int(time.time() * 1000), app=lambda: self.apps.get(target),
            tracer=self._tracer())
        reader.start()

    async def _remove_canary(self, name: str) -> None:
        canary = self.canaries.pop(name, None)
        reader = self.canary_readers.pop(name, None)
        if reader is not None:
            await reader.stop()
        for sender in self.senders.values():
            if canary in sender.flows:
                sender.flows.remove(canary)

    async def _add_flow(self, flow: FlowSettings) -> None:
        self.flows[flow.name] = flow
        if flow.canary.enabled:
            self._add_canary(flow)
        if flow.audit.enabled:
            self.audited[flow.name] = flow
            app = self.apps.get(flow.target)
            if app is not None:
                await app.add_flow(flow.name, flow, int(time.time() * 1000))
                self._start_audit_readers(app, flow)
        if (flow.canary.enabled or flow.audit.enabled) and flow.target not in self.apps \
                and flow.target not in self._audit_tasks:
            # The target's app holds the canary's table as well as the audit's.
            self._audit_tasks[flow.target] = asyncio.create_task(
                self._run_audit(flow.target), name=f"state app of {flow.target}")

    async def _remove_flow(self, name: str) -> None:
        flow = self.flows.pop(name)
        await self._remove_canary(name)
        self.audited.pop(name, None)
        readers = [r for r in self.audit_readers if r.flow.name == name]
        self.audit_readers = [r for r in self.audit_readers if r.flow.name != name]
        await asyncio.gather(*(r.stop() for r in readers), return_exceptions=True)
        app = self.apps.get(flow.target)
        if app is not None:
            app.flows.pop(name, None)

    def _tracer(self) -> trace.Tracer:
        assert self.telemetry is not None
        return self.telemetry.tracer

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
                reason = f"target cluster {target!r} unreachable for the audit: {exc!r}"
                self.state_errors[target] = reason
                if reason != said:
                    log.warning("%s; retrying", reason)
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
        for flow in [f for f in self.audited.values() if f.target == target]:
            self._start_audit_readers(app, flow)

    def _start_audit_readers(self, app: AuditApp, flow: FlowSettings) -> None:
        topics = FlowTopics()
        for side, alias in (("source", flow.source), ("target", flow.target)):
            reader = AuditReader(flow, side, app, topics,  # type: ignore[arg-type]
                                 cluster_kwargs(self.settings, alias, "consumer",
                                                f"heartbeat-{flow.name}-audit-{side}"))
            self.audit_readers.append(reader)
            reader.start()

    def _verdict(self, key: str, value: dict[str, object]) -> None:
        if value["verdict"] != "OK":
            log.warning("audit %s: %s partition %s window %s: %s %s (%s)", value["flow"],
                        value["topic"], value["partition"], value["window_start_ms"],
                        value["verdict"], value["count"] or "", value["reason"])
        self.verdicts.add(key, dict(value))

    async def _announce(self, address: str) -> None:
        self._control = await open_control_log(self.settings, self._targets,
                                               f"heartbeat-{self.instance_id}",
                                               report=self._set_home_error)
        self._control.listen(lambda *_: self._changed.set())
        self._tasks.append(asyncio.create_task(self._follow(), name="follow control log"))
        await announce_forever(self._control, "heartbeat", self.instance_id, address)

    async def _follow(self) -> None:
        """Managed: probe and audit the control log's flows (paused ones too: a paused
        flow's canary is exactly what must turn VIOLATED)."""
        assert self._control is not None
        while True:
            self._changed.clear()
            wanted = {n: Definition(r.source, r.target, r.properties)
                      for n, r in self._control.state.flows.items()
                      if not self._targets or r.target in self._targets}
            for name in [n for n, d in self._definitions.items() if wanted.get(n) != d]:
                del self._definitions[name]
                await self._remove_flow(name)
            for name, definition in wanted.items():
                if name in self._definitions:
                    continue
                try:
                    flow = flow_settings(self.settings, definition)
                except ConfigError as exc:
                    log.error("flow %s cannot be probed here: %s", name, exc)
                    continue
                self._definitions[name] = definition
                await self._add_flow(flow)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), 5.0)

    async def stop(self) -> None:
        await self._grpc.set_serving(False)
        tasks = [*self._tasks, *self._audit_tasks.values()]
        self._stopping = True
        await cancel_and_wait(*tasks)
        parts: list[Any] = [*self.emitters, *self.watchers.values(), *self.senders.values(),
                 *self.canary_readers.values(), *self.audit_readers]
        apps = [*self.apps.values(), *self._pending_apps.values()]
        await asyncio.gather(*(p.stop() for p in [*parts, *apps]), return_exceptions=True)
        if self._control is not None:
            with contextlib.suppress(Exception):
                await self._control.stop()
        await self._grpc.stop()
        if self.telemetry is not None:
            await self.telemetry.stop()

    async def _health(self) -> None:
        while True:
            errors = self.errors()
            await self._grpc.set_serving(not errors)
            await asyncio.sleep(1.0)

    def _set_home_error(self, reason: str | None) -> None:
        self._home_error = reason

    def errors(self) -> list[str]:
        """Why the service cannot do all of its work now (empty: it can)."""
        found = [self._home_error] if self._home_error else []
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
