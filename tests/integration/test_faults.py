"""Faults an operator will meet: a cluster that is not there (yet, or any more)."""

from __future__ import annotations

from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2
from helpers import (
    Record,
    consume_all,
    create_topic,
    produce,
    start_cluster,
    stop_cluster,
    wait_for,
)
from procs import free_port, mm2_config, replicator

from mirrorline.dev.brokers import LocalBroker

pytestmark = pytest.mark.integration

NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def test_unreachable_target_is_reported_then_replication_starts_when_it_answers(
        primary: LocalBroker, unique: str, tmp_path: Path) -> None:
    topic = f"{unique}-waiting"
    await create_topic(primary.bootstrap, topic, 2)
    await produce(primary.bootstrap, topic, [Record(f"{i}".encode(), partition=i % 2)
                                             for i in range(50)])
    port = free_port()
    config = mm2_config({"primary": primary, "late": f"127.0.0.1:{port}"},
                        {"primary->late": {"topics": topic}})
    async with replicator(config, tmp_path, serving=False) as proc:
        async def reported_unreachable() -> bool:
            if await proc.health() != NOT_SERVING:
                return False
            status = await proc.replicator_status()
            late = {c.alias: c for c in status.clusters}.get("late")
            return late is not None and not late.reachable and "unreachable" in late.error
        await wait_for(reported_unreachable, 20, "the missing cluster was not reported")
        status = await proc.replicator_status()
        assert not status.serving
        assert {c.alias: c.reachable for c in status.clusters}["primary"]

        broker = await start_cluster("late", tmp_path / "late", port=port)
        try:
            await proc.wait_serving(timeout=60)
            mirrored = await consume_all(broker.bootstrap, f"primary.{topic}", expected=50)
            assert sum(len(v) for v in mirrored.values()) == 50
        finally:
            await stop_cluster(broker)
        await wait_for(reported_unreachable, 30, "losing the target was not reported")
