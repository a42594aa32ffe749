"""Narrowing a flow's topic filter lets the dropped topics' partitions go (issue 19).

The controller revoked the partitions of topics the new filter leaves out, the worker
released them, and then nothing ever took them off the books: status showed them
"moving to another worker" for good and the flow never left STARTING, which hid any real
stuck partition. Real brokers, a real controller and a real worker.

The flow starts as `<unique>-.*`, which also matches a faust app's leader-election topic
(`<app>-__assignor-__leader`): that one is internal and never mirrored.

The session's brokers are shared, so `heartbeats` and `mirrorline-canary` may already
exist on the source from earlier tests; both bypass the topic filter by default and would
then join the flow. The flow turns both off so that its partitions are exactly the
filter's, whatever ran before.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from helpers import Record, consume_all, create_topic, produce, wait_for
from procs import deployment, deployment_config

from mirrorline.dev.brokers import LocalBroker
from mirrorline.v1 import admin_pb2, flows_pb2

pytestmark = pytest.mark.integration

FAST = {"refresh.topics.interval.seconds": "1"}
#: Only the filter's topics: no heartbeats or canary topics left on the source by others.
FILTER_ONLY = {"heartbeats.replication.enabled": "false", "canary.enabled": "false"}


async def topic_names(bootstrap: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def test_a_narrowed_filter_releases_the_dropped_partitions_and_the_flow_runs(
        clusters: Mapping[str, LocalBroker], unique: str, tmp_path: Path) -> None:
    primary, backup = clusters["primary"], clusters["backup"]
    kept, dropped = f"{unique}-kept", f"{unique}-dropped"
    leader = f"{unique}-app-__assignor-__leader"
    await create_topic(primary.bootstrap, leader, 1)
    await produce(primary.bootstrap, leader, [Record(b"faust")])
    for topic in (kept, dropped):
        await create_topic(primary.bootstrap, topic, 2)
        await produce(primary.bootstrap, topic, [Record(f"{topic}-{i}".encode(),
                                                        partition=i % 2) for i in range(6)])
    flow = "primary->backup"
    config = deployment_config(clusters, {flow: {"topics": f"{unique}-.*", **FAST, **FILTER_ONLY}})
    async with deployment(config, tmp_path) as d:
        await d.controller()
        await d.worker("w1")
        for topic in (kept, dropped):
            await consume_all(backup.bootstrap, f"primary.{topic}", expected=6)
        admin = d.admin()

        async def running(topics: set[str]) -> bool:
            report = await admin.GetStatus(admin_pb2.GetStatusRequest(flow=flow), timeout=10)
            shown = {p.source_topic for p in report.partitions}
            return (shown == topics and len(report.partitions) == 2 * len(topics)
                    and report.flows[0].state == flows_pb2.FLOW_STATE_RUNNING)
        await wait_for(lambda: running({kept, dropped}), 60, "the flow never ran")
        # Discovery created both remote topics in one round; faust's topic was left out.
        assert f"primary.{leader}" not in await topic_names(backup.bootstrap)

        await admin.UpdateFlow(admin_pb2.UpdateFlowRequest(name=flow, set={"topics": kept}),
                               timeout=30)
        await wait_for(lambda: running({kept}), 60,
                       "the dropped topic's partitions were not let go, or the flow did not "
                       "leave STARTING")
        got = await admin.GetFlow(admin_pb2.FlowRequest(name=flow), timeout=10)
        assert got.state == flows_pb2.FLOW_STATE_RUNNING and got.partitions == 2
        assert "moving" not in got.error

        # The kept topic is still mirrored.
        await produce(primary.bootstrap, kept, [Record(b"k", partition=0)])
        await consume_all(backup.bootstrap, f"primary.{kept}", expected=7)
