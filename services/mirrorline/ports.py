"""Default ports of every Mirrorline service (one place for this fact; the README lists it).

gRPC ports serve the service's API, the standard health service and reflection;
metrics ports serve Prometheus text at /metrics. Replicator workers started by
`mirrorline run --workers N` use consecutive ports from the replicator's base.
"""

from __future__ import annotations

GRPC_PORTS = {
    "controller": 7100,
    "replicator": 7110,
    "checkpointer": 7120,
    "heartbeat": 7130,
    "configsync": 7140,
    "spark-executor": 7150,
}

METRICS_PORTS = {
    "controller": 9700,
    "replicator": 9710,
    "checkpointer": 9720,
    "heartbeat": 9730,
    "configsync": 9740,
    "spark-executor": 9750,
}


def run_ports(workers: int, offset: int = 0, *, spark: bool = False) -> dict[str, int]:
    """Every port `mirrorline run --workers N --port-offset OFFSET [--spark]` listens on,
    by use."""
    out: dict[str, int] = {}
    services = [("controller", 1), ("replicator", workers), ("checkpointer", 1),
                ("heartbeat", 1), ("configsync", 1)]
    if spark:
        services.append(("spark-executor", 1))
    for service, count in services:
        for i in range(count):
            name = service if count == 1 else f"{service}-{i}"
            out[f"{name} gRPC"] = GRPC_PORTS[service] + offset + i
            out[f"{name} metrics"] = METRICS_PORTS[service] + offset + i
    return out
