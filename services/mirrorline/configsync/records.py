"""The config-sync service's two internal topics on each flow's target cluster.

* `mirrorline.drift-history.<source>.internal`: one JSON record per applied change (who,
  what, when, outcome) and, with `sync.mode = plan`, per newly detected set of
  differences (kind `drift`), read by `mirrorline admin drift history`. Kept on the target
  because that is where the changes happen and what an auditor of the target looks at.
* `mirrorline.acl-owned.<source>.internal` (compacted): one record per ACL this service
  created on the target, keyed by the ACL; a tombstone when it removed it. This record is
  the only licence to remove an ACL downstream (`sync.topic.acls.mode = full`): an ACL
  absent from it was not created here and is never touched.

Both names end in `.internal`, so MM2's default `topics.exclude` (and ours) never mirrors
them; both carry the source alias, so every flow into a target has its own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaProducer

from mirrorline.core.aclsync import AclBinding
from mirrorline.core.drift import HistoryEntry
from mirrorline.kafka.admin import ClusterAdmin, TopicSpec
from mirrorline.kafka.reader import read_topic


def history_topic(source: str) -> str:
    return f"mirrorline.drift-history.{source}.internal"


def ownership_topic(source: str) -> str:
    return f"mirrorline.acl-owned.{source}.internal"


class SyncRecords:
    """Reads both topics at start, appends to them afterwards."""

    def __init__(self, source: str, *, target_admin: ClusterAdmin,
                 producer_kwargs: Mapping[str, Any], consumer_kwargs: Mapping[str, Any],
                 replication_factor: int) -> None:
        self.history_topic = history_topic(source)
        self.ownership_topic = ownership_topic(source)
        self._admin = target_admin
        self._producer_kwargs = dict(producer_kwargs)
        self._consumer_kwargs = consumer_kwargs
        self._rf = replication_factor
        self._producer: AIOKafkaProducer | None = None
        self.history: list[HistoryEntry] = []
        self.owned: set[AclBinding] = set()

    async def start(self, timeout: float = 60.0) -> None:
        await self._admin.ensure_topic(TopicSpec(self.history_topic, 1, self._rf))
        await self._admin.ensure_topic(TopicSpec(
            self.ownership_topic, 1, self._rf, {"cleanup.policy": "compact"}))
        self._producer = AIOKafkaProducer(**self._producer_kwargs)
        await self._producer.start()
        for record in await read_topic(self._consumer_kwargs, self.history_topic,
                                       partitions=1, timeout=timeout):
            if record.value is not None:
                try:
                    self.history.append(HistoryEntry.from_json(record.value))
                except (ValueError, KeyError):
                    continue  # not ours; an operator may have written to the topic
        owned: dict[str, bool] = {}
        for record in await read_topic(self._consumer_kwargs, self.ownership_topic,
                                       partitions=1, timeout=timeout):
            if record.key is not None:
                owned[record.key.decode()] = record.value is not None
        for key, alive in owned.items():
            if alive:
                try:
                    self.owned.add(AclBinding.from_key(key))
                except (ValueError, TypeError):
                    continue

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def record(self, entries: Iterable[HistoryEntry]) -> None:
        assert self._producer is not None
        batch = list(entries)
        for entry in batch:
            await self._producer.send(self.history_topic, entry.to_json(),
                                      timestamp_ms=entry.at_ms)
        await self._producer.flush()
        self.history.extend(batch)

    async def set_owned(self, owned: Iterable[AclBinding]) -> None:
        """Make the ownership record equal `owned` (writes only the differences)."""
        assert self._producer is not None
        wanted = set(owned)
        now = int(time.time() * 1000)
        for binding in wanted - self.owned:
            await self._producer.send(self.ownership_topic,
                                      json.dumps({"created_at_ms": now}).encode(),
                                      key=binding.key().encode())
        for binding in self.owned - wanted:
            await self._producer.send(self.ownership_topic, None, key=binding.key().encode())
        await self._producer.flush()
        self.owned = wanted
