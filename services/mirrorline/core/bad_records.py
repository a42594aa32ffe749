"""Skipping a bad record on an internal topic: said once, loudly enough, and never fatal.

Every service rebuilds its view of the world from internal topics (control log, progress,
offset syncs, checkpoints, offset map, and later heartbeats, audit and drift records).
Anyone can write to those topics: an older or newer version, a hand-made test record, a
foreign tool. A record that does not decode, or decodes to something impossible (a run
of -3 offsets), must not freeze the reader -- retrying the same record forever is the
worst outcome, because everything behind it waits too. So every reader funnels its
decoding through `decode_or_skip`: a bad record is reported once at WARNING with its
topic, partition and offset (the coordinates an operator needs to inspect it with any
Kafka tool), counted, and skipped. The reader moves on to the next record.

Pure logic (logging only): the Kafka adapters hand in the record's coordinates.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Remembered coordinates per reader, so a re-read (after a reconnect) does not repeat a
#: warning; bounded so that a topic full of garbage cannot grow memory.
_REMEMBER = 10_000


class BadRecords:
    """Counts and reports the bad records one reader met on its internal topic(s)."""

    def __init__(self, reader: str) -> None:
        #: Who reads, for the log line (e.g. "checkpointer a->b (offset map)").
        self.reader = reader
        self.count = 0
        self._reported: set[tuple[str, int, int]] = set()

    def skip(self, topic: str, partition: int, offset: int, reason: str) -> None:
        """Report one bad record (once per coordinates) and count it."""
        where = (topic, partition, offset)
        if where in self._reported:
            return
        if len(self._reported) >= _REMEMBER:
            self._reported.clear()
        self._reported.add(where)
        self.count += 1
        log.warning("%s: skipped a bad record at %s-%d offset %d: %s", self.reader, topic,
                    partition, offset, reason)

    def decode(self, topic: str, partition: int, offset: int,
               decode: Callable[[], T]) -> T | None:
        """`decode()`, or None (reported) when it raises: a bad record never escapes."""
        try:
            return decode()
        except Exception as exc:  # any decoder's failure means "this record is bad"
            self.skip(topic, partition, offset, _reason(exc))
            return None


def _reason(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
