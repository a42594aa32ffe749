"""The heartbeat service on the shared service skeleton (`flowservice.FlowService`).

No broker is needed: the clusters are addresses nothing listens on, which is what a
deployment with every cluster down looks like to the service.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mirrorline.checkpointer.service import CheckpointerService
from mirrorline.configfile import load_config
from mirrorline.core.errors import ConfigError
from mirrorline.heartbeat.service import HeartbeatService

pytestmark = pytest.mark.integration

NOTHING_ON = """\
clusters = a, b
a.bootstrap.servers = 127.0.0.1:1
b.bootstrap.servers = 127.0.0.1:2
a->b.enabled = false
emit.heartbeats.enabled = false
"""


async def test_no_flow_serves_topology_where_a_checkpointer_refuses(tmp_path: Path) -> None:
    """A deployment with every flow and heartbeat off still gets topology from the
    heartbeat service (it starts, watches both clusters and stops), while the same file is
    a configuration error for a service that only runs flows."""
    path = tmp_path / "mm2.properties"
    path.write_text(NOTHING_ON)
    settings = load_config(str(path))
    with pytest.raises(ConfigError, match="no enabled replication flow to checkpoint"):
        await CheckpointerService(settings, metrics_port=None).start()

    service = HeartbeatService(settings, metrics_port=None)
    await service.start()
    try:
        assert sorted(service.watchers) == ["a", "b"]
        assert service.runners == {} and service.emitters == []
    finally:
        await asyncio.wait_for(service.stop(), service.stop_budget_s)
