"""A worker keeps trying to take on the partitions granted to it.

Taking partitions on reads the target first (durable progress, the offset map, the
tails); that read can fail -- the target unreachable for a moment, a read timing out. The
driver used to die silently on such a failure, leaving the partitions granted to the
worker and copied by nobody until the worker restarted.

The flow here is a stand-in for `FlowReplicator` whose `set_partitions` fails on demand:
a failure at exactly the moment of a grant cannot be staged reliably against a real
broker, and the driver's retry is the behaviour under test, not the copying.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, cast

from aiokafka import TopicPartition
from helpers import wait_for

from mirrorline.core.flowdefs import Definition
from mirrorline.replicator import worker
from mirrorline.replicator.worker import Desired, FlowDriver


class FailingFlow:
    name = "a->b"

    def __init__(self, failures: int) -> None:
        self.ready = asyncio.Event()
        self.ready.set()
        self.paused = False
        self.failures = failures
        self.owned: dict[TopicPartition, str] = {}
        self.calls = 0

    async def start(self) -> None:
        await asyncio.Event().wait()

    async def set_partitions(self, wanted: Mapping[TopicPartition, str]) -> None:
        self.calls += 1
        if self.failures:
            self.failures -= 1
            raise TimeoutError("reading 'mm2-offsets.a.internal' to its end took over 60s")
        self.owned = dict(wanted)

    async def stop(self) -> None:
        pass


async def test_a_grant_whose_first_attempt_fails_is_taken_on_by_a_retry(
        monkeypatch: Any) -> None:
    monkeypatch.setattr(worker, "RETRY_S", 0.01)
    flow = FailingFlow(failures=2)
    settled = asyncio.Event()
    definition = Definition("a", "b", {"topics": "t"})
    driver = FlowDriver(cast(Any, flow), Desired(1, definition, {}, False), settled.set)
    driver.start()
    grant = {TopicPartition("t", 0): "a.t", TopicPartition("t", 1): "a.t"}
    driver.want(Desired(2, definition, grant, False))
    try:
        async def taken() -> bool:
            return flow.owned == grant
        await wait_for(taken, 5, "the granted partitions were never taken on", interval=0.01)
        assert flow.calls >= 3
        assert driver.settled
    finally:
        await driver.stop()
