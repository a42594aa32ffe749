"""Keeps an `OffsetMap` up to date from the offset-map topic, reading only what is new.

The first `refresh()` reads the topic from its beginning; later ones continue where the
previous stopped, so a partition hand-over costs only the runs written since. Used where
a partition starts copying (the replicator, the Spark executor) to find the last point
that maps exactly between source and target.

A record that does not decode, or decodes to something impossible, is reported once at
WARNING with its coordinates and skipped (`core/bad_records.py`): it can only make the map
know less (a longer tail to match), never wrong.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from mirrorline.core.bad_records import BadRecords
from mirrorline.core.offset_map import OffsetMap
from mirrorline.kafka.reader import TopicReader
from mirrorline.v1 import offset_map_pb2

log = logging.getLogger(__name__)


class OffsetMapFollower:
    def __init__(self, consumer_kwargs: Mapping[str, Any], topic: str) -> None:
        self.topic = topic
        self.map = OffsetMap()
        self._kwargs = dict(consumer_kwargs)
        self._position: int | None = None
        self.bad_records = BadRecords(f"offset map reader ({topic})")

    async def refresh(self, timeout: float = 30.0) -> OffsetMap:
        """Fold in every run written since the last refresh; return the map."""
        reader = TopicReader(self._kwargs, self.topic)
        try:
            await reader.start(partitions=1, resume_at=None if self._position is None
                               else {0: self._position})
            for record in await reader.read_to_end(timeout):
                self._apply(record.offset, record.value)
                self._position = record.offset + 1
        finally:
            await reader.stop()
        return self.map

    def _apply(self, offset: int, value: bytes | None) -> None:
        def fold() -> None:  # decoding and checking happen before anything changes
            message = offset_map_pb2.OffsetMapRecord()
            message.ParseFromString(value or b"")
            self.map.add_record(message)

        self.bad_records.decode(self.topic, 0, offset, fold)
