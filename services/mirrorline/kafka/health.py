"""Is a cluster reachable right now? One cheap metadata request, periodically.

Client libraries retry quietly; an operator wants to see "cluster backup unreachable
since 12:03: connection refused" in the health check and the status. Each service runs
one probe per cluster alias it needs and derives its gRPC health from them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient

from mirrorline.kafka.causes import unreachable

log = logging.getLogger(__name__)


class ClusterProbe:
    def __init__(self, alias: str, admin_kwargs: Mapping[str, Any], *, interval: float = 3.0,
                 timeout: float = 5.0) -> None:
        self.alias = alias
        self._kwargs = dict(admin_kwargs)
        self._kwargs.setdefault("request_timeout_ms", int(timeout * 1000))
        self._interval = interval
        self._timeout = timeout
        self.reachable: bool | None = None
        self.error: str | None = None
        self.since: float = time.time()
        self._task: asyncio.Task[None] | None = None
        self._client: AIOKafkaAdminClient | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"probe {self.alias}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._close_client()

    async def check(self) -> bool:
        """Probe once now (also used at start-up before anything else happens)."""
        began = time.monotonic()
        try:
            if self._client is None:
                self._client = AIOKafkaAdminClient(**self._kwargs)
                await asyncio.wait_for(self._client.start(), self._timeout)
            await asyncio.wait_for(self._client.describe_cluster(), self._timeout)
        except Exception as exc:
            await self._close_client()
            self._set(False, unreachable(self.alias, exc, self._kwargs.get("bootstrap_servers"),
                                         protocol=self._kwargs.get("security_protocol"),
                                         since=began))
            return False
        self._set(True, None)
        return True

    def _set(self, reachable: bool, error: str | None) -> None:
        if reachable != self.reachable or (error != self.error and error is not None):
            self.since = time.time()
            if reachable:
                log.info("cluster %r reachable", self.alias)
            else:
                log.warning("%s", error)
        self.reachable, self.error = reachable, error

    async def _run(self) -> None:
        while True:
            await self.check()
            await asyncio.sleep(self._interval)

    async def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), self._timeout)
