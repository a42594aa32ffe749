"""One audit side's folding of fetched batches: whole where paired, else record by record.

A reader (`audit_reader`) hands each partition's part of a fetch to its `SideFolder`,
which cuts it into batches (`core.batches.split`), leaves out control batches and, under
read_committed, aborted transactions' (as the consumer does), and queues the rest in
offset order. A batch eligible for whole verification (`core.batch_audit.batch_key`) is
paired at once with a batch the other side holds, or else held, on either side, until the
other side's reader pairs it or its hold ends; anything else is decoded
(`kafka.rawrecords.decode`, which checks the CRC). `drain` folds the queue's resolved
head into the cycle's deltas, tokens and gaps, so a side's table position never passes a
batch it has not folded.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka.errors import CorruptRecordException

from mirrorline.core import record_audit as audit
from mirrorline.core.batch_audit import (
    Held,
    Pairing,
    State,
    batch_key,
    fold_token,
    unmatched,
)
from mirrorline.core.batches import AbortedTransactions, crc32c, split
from mirrorline.kafka.rawrecords import decode

__all__ = ["HOLD_BYTES", "Cycle", "SideFolder"]

#: Most bytes of source batches one flow holds for pairing; beyond, the oldest are decoded.
HOLD_BYTES = 64 << 20
_ATTRIBUTES = 21


@dataclass
class Cycle:
    """What one report cycle of a partition folded (sent as one fold event part)."""

    deltas: dict[str, list[int]] = field(default_factory=dict)
    tokens: dict[str, dict[str, int]] = field(default_factory=dict)
    top: int = -1
    #: Offset gaps met: (expected offset, first record after it, its timestamp).
    gaps: list[tuple[int, int, int]] = field(default_factory=list)


class SideFolder:
    """The batches one side of one flow has read and not yet folded, per partition."""

    def __init__(self, side: str, pairing: Pairing, *, window_ms: int, first: int,
                 hold_ms: int,
                 other_tokens: Callable[[str], dict[str, dict[str, int]]],
                 own_tokens: Callable[[str], dict[str, dict[str, int]]]) -> None:
        self.side = side
        self.pairing = pairing
        self.window_ms = window_ms
        self.first = first
        self.hold_ms = hold_ms
        self._other_tokens = other_tokens
        self._own_tokens = own_tokens
        self.queues: dict[str, deque[Held]] = {}
        #: Records folded; batches and records of them verified whole (paired).
        self.records = 0
        self.whole_batches = 0
        self.whole_records = 0

    def read(self, part: str, records: bytes | memoryview, position: int, *, where: str,
             aborted: Iterable[tuple[int, int]] | None, now_ms: int,
             cycle: Cycle) -> int:
        """Queue the batches of one partition's fetched `records` (fetched from
        `position`); returns the next position to fetch from."""
        found = split(records)
        if any(batch.header is None for batch in found.batches):
            return self._read_legacy(part, records, position, where=where,
                                     aborted=aborted, now_ms=now_ms)
        queue = self.queues.setdefault(part, deque())
        marks = AbortedTransactions(aborted) if aborted is not None else None
        next_offset = position
        for batch in found.batches:
            header = batch.header
            assert header is not None
            skip = marks is not None and marks.is_aborted(batch)
            if crc32c(batch.data[_ATTRIBUTES:]) != header.crc:
                raise CorruptRecordException(
                    f"{where}: the record batch at offset {header.base_offset} does not "
                    "match its CRC")
            if not (skip or header.is_control or header.record_count == 0
                    or header.last_offset < position):
                self._queue(part, queue, batch, position, now_ms, cycle)
            next_offset = max(next_offset, header.next_offset)
        return next_offset

    def _queue(self, part: str, queue: deque[Held], batch: Any, position: int, now_ms: int,
               cycle: Cycle) -> None:
        found = batch_key(batch, position, self.window_ms, self.first)
        if found is None:
            queue.append(Held(batch, position, None, -1, now_ms, State.DECODE))
            return
        key, window = found
        entry = Held(batch, position, key, window, now_ms, State.DECODE)
        if self.pairing.match(self.side, part, key, batch) or \
                self._unmatched(part, queue, window, key, cycle):
            entry.state = State.WHOLE
        else:
            entry.state = State.PENDING
            self.pairing.hold(self.side, part, entry)
        queue.append(entry)

    def _unmatched(self, part: str, queue: deque[Held], window: int, key: str,
                   cycle: Cycle) -> bool:
        other = self._other_tokens(part)
        if not other.get(str(window), {}).get(key):
            return False
        claimed = cycle.tokens.get(str(window), {}).get(key, 0) + sum(
            1 for e in queue if e.state is State.WHOLE and e.key == key and e.window == window)
        return unmatched(other, self._own_tokens(part), claimed, window, key)

    def _read_legacy(self, part: str, records: bytes | memoryview, position: int, *, where: str,
                     aborted: Iterable[tuple[int, int]] | None, now_ms: int) -> int:
        """Magic 0/1 message sets among the batches: decoded whole, as before."""
        decoded = decode(bytes(records), position, where=where, aborted=aborted)
        queue = self.queues.setdefault(part, deque())
        for found in decoded.batches:
            queue.append(Held(None, position, None, -1, now_ms,
                              State.DECODE, found))
        return decoded.next_offset

    def drain(self, part: str, expected: int, now_ms: int, cycle: Cycle, *,
              where: str) -> int:
        """Fold the queue's resolved head (held batches past their hold, or beyond
        `HOLD_BYTES`, are decoded); returns the next offset expected to hold a record."""
        queue = self.queues.get(part)
        while queue:
            entry = queue[0]
            if entry.state is State.PENDING:
                if now_ms - entry.read_ms < self.hold_ms and \
                        self.pairing.held_bytes <= HOLD_BYTES:
                    break
                # The other half may have reached the table meanwhile, folded by the
                # other side before a restart of either reader.
                assert entry.key is not None
                entry.state = State.WHOLE if self._unmatched(
                    part, queue, entry.window, entry.key, cycle) else State.DECODE
            queue.popleft()
            self.pairing.release(self.side, part, entry)
            expected = self._fold(entry, expected, cycle, where)
        return expected

    def _fold(self, entry: Held, expected: int, cycle: Cycle, where: str) -> int:
        if entry.state is State.WHOLE:
            assert entry.batch is not None
            header = entry.batch.header
            assert header is not None and entry.key is not None
            if header.base_offset > expected:
                cycle.gaps.append((expected, header.base_offset, header.base_timestamp))
            fold_token(cycle.deltas, cycle.tokens, entry.key, entry.window,
                       header.record_count)
            cycle.top = max(cycle.top, header.max_timestamp)
            self.records += header.record_count
            self.whole_batches += 1
            self.whole_records += header.record_count
            return header.next_offset
        batches = entry.extra if entry.batch is None else \
            decode(bytes(entry.batch.data), entry.position, where=where).batches
        if entry.batch is None:
            batches = [batches]
        for records in batches:
            head = records[0]
            if head.offset > expected:
                cycle.gaps.append((expected, head.offset, head.timestamp))
            if records[-1].offset - head.offset + 1 != len(records):
                for before, record in itertools.pairwise(records):
                    if record.offset > before.offset + 1:
                        cycle.gaps.append((before.offset + 1, record.offset, record.timestamp))
            expected = records[-1].offset + 1
            folded, top = audit.fold_records(cycle.deltas, records, self.window_ms,
                                             self.first)
            cycle.top = max(cycle.top, top)
            self.records += folded
        return expected

    def frontier(self, part: str) -> int | None:
        """Base offset of the oldest batch read and not folded, None when none."""
        queue = self.queues.get(part)
        if not queue:
            return None
        head = queue[0]
        if head.batch is None:
            return int(head.extra[0].offset)
        return head.batch.base_offset

    def forget(self) -> None:
        """Drop everything read and not folded (the reader re-reads from the table)."""
        for part, queue in self.queues.items():
            for entry in queue:
                self.pairing.release(self.side, part, entry)
        self.queues.clear()
