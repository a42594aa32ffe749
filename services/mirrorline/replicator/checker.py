"""Checks the target before a failed batch is sent again.

A produce that failed (timeout, broken connection, broker restart, or a send aborted on
purpose) may have been written all the same; sending it again blindly puts it on the
target twice. Each pump knows where its copies end on the target; this task reads what
lies beyond that end and tells the pump how much of its failed batch is already there
(`mirrorline.core.tail_match.already_landed`). While the target cannot be read, nothing
is sent: the check is retried with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiokafka import TopicPartition

from mirrorline.core.tail_match import already_landed
from mirrorline.kafka.ranges import Range, read_ranges
from mirrorline.kafka.resume import MAX_TAIL_RECORDS
from mirrorline.replicator.pump import Delivered, PartitionPump

log = logging.getLogger(__name__)


class TargetChecker:
    def __init__(self, pumps: Mapping[TopicPartition, PartitionPump],
                 target_consumer: Mapping[str, Any], *,
                 on_ack: Callable[[PartitionPump, Delivered], None],
                 on_checked: Callable[[], None]) -> None:
        self._pumps = pumps
        self._target = dict(target_consumer)
        self._on_ack = on_ack
        self._on_checked = on_checked
        self.wake = asyncio.Event()

    async def run(self) -> None:
        while True:
            now = time.monotonic()
            due = [p for p in self._pumps.values() if p.check_due(now)]
            if due:
                await self.check(due)
                self._on_checked()
                continue
            waiting = [p.retry_at for p in self._pumps.values() if p.unverified is not None]
            timeout = max(0.05, min(waiting) - now) if waiting else None
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout)

    async def check(self, pumps: list[PartitionPump]) -> None:
        ranges = {}
        for pump in pumps:
            assert pump.target_end is not None
            ranges[pump] = Range(pump.target_end, MAX_TAIL_RECORDS)
        answered = True
        try:
            await read_ranges(self._target, {TopicPartition(p.target_topic, p.partition): r
                                             for p, r in ranges.items()}, timeout=10.0)
        except Exception as exc:  # the target is unreachable: nothing is sent meanwhile
            answered = False
            for r in ranges.values():
                r.error = r.error or repr(exc)
        now = time.monotonic()
        for pump, r in ranges.items():
            if pump.unverified is None or not pump.check_due(now):
                continue  # stopped or released meanwhile
            if r.error or r.end is None:
                pump.check_failed(r.error or "no answer from the target", now,
                                  answered=answered)
                continue
            landed = None if r.truncated else already_landed(r.records, pump.unverified)
            delivered = pump.checked(landed, r.end, now)
            if delivered is not None:
                log.info("%s %s-%d: %d records of a failed produce were on the target "
                         "already; not sent again", pump.flow, pump.source_topic,
                         pump.partition, delivered.shipment.count)
                self._on_ack(pump, delivered)
