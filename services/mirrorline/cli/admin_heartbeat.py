"""`mirrorline admin topology|canary|audit`: the heartbeat service's findings.

Kept apart from `cli/admin.py`; these commands call through `cli/admin_calls.py`, so they
work against the controller (which forwards) or directly against the heartbeat service
(`--server 127.0.0.1:7130`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from mirrorline.cli.admin_args import parse_flow_name, parse_time
from mirrorline.cli.admin_calls import unary
from mirrorline.cli.admin_format import NONE, format_age, format_utc, render_table
from mirrorline.v1 import heartbeat_pb2

Leaf = Callable[[Any, str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]


def format_topology(report: heartbeat_pb2.TopologyReport) -> str:
    rows = []
    for cluster in report.clusters:
        if not cluster.paths:
            rows.append([cluster.cluster, NONE, NONE, NONE, NONE,
                         "unreachable: " + cluster.error if not cluster.reachable
                         else "no upstream cluster"])
        for p in cluster.paths:
            route = " -> ".join([*p.route, p.cluster])
            state = ("stale: " + p.reason) if p.stale else "ok"
            rows.append([p.cluster, p.route[0], str(p.hops), route,
                         format_age(p.age_ms) if p.age_ms >= 0 else NONE, state])
    return render_table(["CLUSTER", "UPSTREAM", "HOPS", "PATH", "HEARTBEAT AGE", "STATE"],
                        rows)


def _ms(value: float) -> str:
    return NONE if value < 0 else f"{value:.0f}ms"


def format_canary(report: heartbeat_pb2.CanaryReport) -> str:
    rows = [[f.flow, f.health, _ms(f.p50_ms), _ms(f.p99_ms), _ms(f.max_ms),
             str(f.lost), str(f.duplicated), f"{f.slo_ms}ms", f.reason] for f in report.flows]
    table = render_table(["FLOW", "HEALTH", "P50", "P99", "MAX", "LOST", "DUP", "SLO",
                          "REASON"], rows)
    partitions = [[f.flow, str(p.partition), _ms(p.p50_ms), _ms(p.p99_ms), _ms(p.max_ms),
                   str(p.samples)] for f in report.flows for p in f.by_partition]
    if not partitions:
        return table
    return table + "\n\n" + render_table(
        ["FLOW", "PARTITION", "P50", "P99", "MAX", "SAMPLES"], partitions)


def format_audit(report: heartbeat_pb2.AuditReport) -> str:
    rows = [[w.topic, str(w.partition), format_utc(w.window_start_ms),
             f"{w.verdict} {w.count}" if w.count else w.verdict, str(w.source_count),
             str(w.target_count)] for w in report.windows]
    table = render_table(["TOPIC", "PARTITION", "WINDOW", "VERDICT", "SOURCE", "TARGET"], rows)
    t = report.totals
    counts = ", ".join(f"{k} {v}" for k, v in sorted(t.windows_by_verdict.items())) or "none"
    lines = [table, "", f"{t.flow}: windows {counts}; records missing {t.missing_records}, "
             f"duplicated {t.duplicated_records}, late {t.late_records}"]
    if t.error:
        lines.append(f"audit not running: {t.error}")
    return "\n".join(lines)


def register(admin_sub: Any, leaf: Leaf) -> None:
    def topology(args: argparse.Namespace) -> int:
        return unary(args, lambda stub: stub.Topology,
                     heartbeat_pb2.TopologyRequest(cluster=args.cluster or ""),
                     format_topology)

    def canary(args: argparse.Namespace) -> int:
        return unary(args, lambda stub: stub.Canary,
                     heartbeat_pb2.CanaryRequest(flow=args.flow or ""), format_canary)

    def audit(args: argparse.Namespace) -> int:
        return unary(args, lambda stub: stub.Audit, heartbeat_pb2.AuditRequest(
            flow=args.flow, topic=args.topic or "", since_ms=args.since or 0), format_audit)

    parser = leaf(admin_sub, "topology", topology,
                  "upstream clusters, hops and heartbeat age of every path")
    parser.add_argument("--cluster", metavar="ALIAS", help="only this cluster")
    parser = leaf(admin_sub, "canary", canary, "canary latency and SLO status per flow")
    parser.add_argument("--flow", type=parse_flow_name, metavar="NAME",
                        help="only this flow (SOURCE->TARGET)")
    parser = leaf(admin_sub, "audit", audit, "audit verdicts of a flow's windows")
    parser.add_argument("flow", type=parse_flow_name, metavar="FLOW", help="SOURCE->TARGET")
    parser.add_argument("--topic", metavar="TOPIC", help="only this source topic")
    parser.add_argument("--since", type=parse_time, metavar="TIME",
                        help="only windows starting at or after TIME (ISO 8601, UTC)")
