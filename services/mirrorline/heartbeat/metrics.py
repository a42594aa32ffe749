"""The heartbeat service's metrics (Prometheus and OTLP through the one telemetry setup).

Observed on collection from the live state, so they cost nothing between scrapes:
canary latency percentiles and health per flow, lost and duplicated canaries, audit
windows by verdict, records the audit verified per side, and the heartbeat age of every
topology path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from mirrorline.core.canary import Health
from mirrorline.core.record_audit import Verdict

if TYPE_CHECKING:
    from mirrorline.heartbeat.service import HeartbeatService

HEALTH_VALUE = {Health.UNKNOWN.value: 0, Health.OK.value: 1, Health.DEGRADED.value: 2,
                Health.VIOLATED.value: 3}

Callback = Callable[[CallbackOptions], Iterable[Observation]]


def register_metrics(service: HeartbeatService, meter: Meter) -> None:
    def flow_attrs(name: str) -> dict[str, str]:
        flow = service.flows[name]
        return {"source": flow.source, "target": flow.target}

    def canary(pick: str) -> Callback:
        def callback(_options: CallbackOptions) -> list[Observation]:
            out = []
            for name in service.canaries:
                status = service.canary_status(name)
                value = {"p50": status.p50_ms, "p99": status.p99_ms, "max": status.max_ms,
                         "health": HEALTH_VALUE[status.health], "lost": status.lost_total,
                         "duplicated": status.duplicated_total}[pick]
                if value >= 0:
                    out.append(Observation(value, flow_attrs(name)))
            return out
        return callback

    for pick in ("p50", "p99", "max"):
        meter.create_observable_gauge(f"canary-latency-ms-{pick}", callbacks=[canary(pick)])
    meter.create_observable_gauge("canary-health", callbacks=[canary("health")],
                                  description="0 unknown, 1 OK, 2 degraded, 3 violated")
    meter.create_observable_counter("canary-lost", callbacks=[canary("lost")])
    meter.create_observable_counter("canary-duplicated", callbacks=[canary("duplicated")])

    def windows(_options: CallbackOptions) -> list[Observation]:
        out = []
        for name in service.audited:
            by_verdict, _, _ = service.verdicts.totals(name)
            # Every verdict from 0: a series born at 7 has no increase a dashboard can see.
            for verdict in [*(v.value for v in Verdict),
                            *sorted(set(by_verdict) - {v.value for v in Verdict})]:
                out.append(Observation(by_verdict.get(verdict, 0),
                                       {**flow_attrs(name), "verdict": verdict}))
        return out

    def verified(_options: CallbackOptions) -> list[Observation]:
        return [Observation(r.records, {**flow_attrs(r.flow.name), "side": r.side})
                for r in service.audit_readers]

    def whole(_options: CallbackOptions) -> list[Observation]:
        return [Observation(r.whole_batches, {**flow_attrs(r.flow.name), "side": r.side})
                for r in service.audit_readers]

    meter.create_observable_counter("audit-windows", callbacks=[windows])
    meter.create_observable_counter("audit-records", callbacks=[verified])
    meter.create_observable_counter(
        "audit-whole-batches", callbacks=[whole],
        description="batches verified whole: paired with the other side's, not decoded")

    def ages(_options: CallbackOptions) -> list[Observation]:
        now = int(time.time() * 1000)
        out = []
        for watcher in service.watchers.values():
            for path in watcher.view(now).paths:
                if path.age_ms is not None:
                    out.append(Observation(path.age_ms, {
                        "cluster": path.cluster, "origin": path.origin,
                        "hops": str(path.hops), "topic": path.topic}))
        return out

    meter.create_observable_gauge("heartbeat-age-ms", callbacks=[ages])
