"""The config-sync process: one FlowRunner per flow, its gRPC API, its metrics.

Everything that follows a remote topic's life after the replicator created it happens
here, in one place: topic configs, partition growth, ACLs, and drift plans of all three.
Flows come from the control log when a controller runs the deployment (`--managed`, as
`mirrorline run` starts it), else from the properties file. In managed mode the service
announces itself to the leading controller, whose Admin API forwards the drift commands.
Start-up, following the control log, announcing and stopping are
`mirrorline.flowservice.FlowService`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from mirrorline.configsync.api import ConfigSyncServicer
from mirrorline.configsync.runner import FlowRunner
from mirrorline.core.settings import FlowSettings
from mirrorline.flowservice import FlowService
from mirrorline.grpcserver import ServiceServer
from mirrorline.v1 import drift_pb2, drift_pb2_grpc

log = logging.getLogger(__name__)


class ConfigSyncService(FlowService[FlowRunner]):
    kind = "configsync"
    nothing_to_do = "no enabled replication flow to keep in step"
    verb = "synced"

    def new_runner(self, flow: FlowSettings) -> FlowRunner:
        return FlowRunner(flow, self.instance_id)

    def add_servicers(self, server: ServiceServer) -> None:
        server.add(drift_pb2_grpc.add_ConfigSyncServicer_to_server, ConfigSyncServicer(self),
                   [drift_pb2.DESCRIPTOR.services_by_name["ConfigSync"].full_name])

    def serving(self) -> bool:
        """SERVING once every flow's runner has started (and, managed, the control log
        is read)."""
        return self.joined and all(r.started for r in self.runners.values())

    def register_metrics(self, meter: Meter) -> None:
        def observe(pick: str) -> Iterable[Observation]:
            out = []
            for runner in self.runners.values():
                plan = runner.plan
                attrs = {"source": runner.flow.source, "target": runner.flow.target,
                         "mode": runner.flow.sync_mode}
                if pick == "pending" and plan is not None:
                    out.append(Observation(plan.changes, attrs))
                elif pick == "differences" and plan is not None:
                    out.append(Observation(plan.differences, attrs))
                elif pick == "unavailable" and plan is not None:
                    out.append(Observation(len(plan.unavailable), attrs))
                elif pick == "rounds":
                    out.append(Observation(runner.rounds, attrs))
                elif pick == "applied":
                    out.append(Observation(runner.applied_changes, attrs))
                elif pick == "failures":  # both kinds from 0, so increase() sees the first
                    out.append(Observation(runner.failed_rounds, {**attrs, "kind": "round"}))
                    out.append(Observation(runner.failed_changes, {**attrs, "kind": "change"}))
            return out

        def callback(pick: str):  # type: ignore[no-untyped-def]
            def read(_options: CallbackOptions) -> Iterable[Observation]:
                return observe(pick)
            return read

        meter.create_observable_gauge(
            "configsync-drift-changes", callbacks=[callback("pending")],
            description="changes the current drift plan would make (pending with "
                        "sync.mode = plan)")
        meter.create_observable_gauge(
            "configsync-drift-differences", callbacks=[callback("differences")],
            description="differences between source and target, including those the "
                        "sync leaves alone")
        meter.create_observable_gauge(
            "configsync-unavailable-features", callbacks=[callback("unavailable")],
            description="features (configs, partitions, acls) unavailable or disabled")
        meter.create_observable_counter(
            "configsync-rounds", callbacks=[callback("rounds")],
            description="sync rounds completed")
        meter.create_observable_counter(
            "configsync-applied-changes", callbacks=[callback("applied")],
            description="changes (configs, partitions, ACLs) the rounds applied to the target")
        meter.create_observable_counter(
            "configsync-failures", callbacks=[callback("failures")],
            description="failed rounds or connection attempts (kind=round) and changes the "
                        "target refused (kind=change)")
