"""The audit's whole-batch verification: a target batch the mirror copied verbatim is
checked against its source batch as bytes, without decoding a record.

The batch path (`core.batches`) copies a source batch's records section -- everything
after the 61-byte header: keys, values, headers, timestamp and offset deltas, compressed
or not -- byte for byte; only the header's offsets, producer fields and CRC change. When a
target batch's records section equals a source batch's, and so do the header fields that
give its records their meaning (record count, lastOffsetDelta, codec and timestamp type,
base and max timestamp), the two batches hold the same records in the same order: per
record digests of both would be equal. So such a pair is verified whole.

How it fits the per-window audit (`core.record_audit`): each reader looks each eligible
batch (`batch_key`) up among the batches the other side's reader holds in a `Pairing`,
and *holds* it there itself when it finds no partner, instead of folding it at once.
Usually the source's half comes first, as the mirror copies after it; but the readers
report on one wall-clock grid, so a quiet partition's two halves are answered in the same
moment, and either may be read first. A batch equal to one the other side holds (its
key, then its bytes compared) is a *pair*: both sides fold the same token into the
window of the batch's timestamps -- the batch's record count and a 64-bit value derived
from its key (`fold_token`) -- and neither decodes. Everything else is decoded and folded
record by record, as before: a held batch once it was held `hold_ms` (the audit's grace:
the window waits that long for the mirror anyway) or when held bytes exceed their bound.
So each side's window sum is still compared with the other's; a pair adds equally to
both, and anything not paired is summed record by record on both sides:
  * a batch written twice to the target: the first copy pairs, the second finds no
    partner left, is decoded when its hold ends, and its records count extra
    (DUPLICATED);
  * a batch missing from the target: its source batch is never paired, is decoded when
    its hold ends, and the target is short (MISSING);
  * a byte altered in a copied batch: no partner, so both batches are decoded, and the
    window's record checksums differ (CORRUPTED); a record reordered inside a batch makes
    it differ too, and is decoded;
  * the record path (re-batched records, compacted batches): no batch pairs; both sides
    decode, and equal records give equal sums.
Pairs are compared one batch against one batch, never as a sum: the key's CRC-32C of the
records section only finds the candidate; the bytes themselves decide.

A restart must not leave one side of a pair folded as a token and the other decoded.
Each side's table entry therefore keeps the tokens it folded per open window (``b`` in
`record_audit.Side`); a side that finds no held partner in memory pairs with a token the
other side folded that it has not matched yet (`unmatched`), when it reads the batch and
again when the batch's hold ends. Readers fold strictly in offset order, so a held batch
keeps its side's table position before it: after a crash it is read again.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from hashlib import blake2b
from typing import Any, Final

from mirrorline.core.batches import HEADER_SIZE, Batch, records_crc
from mirrorline.core.record_audit import MASK, window_start

__all__ = [
    "MIN_WHOLE_RECORDS",
    "Held",
    "Pairing",
    "State",
    "batch_key",
    "fold_token",
    "other_side",
    "same_records",
    "token_value",
    "unmatched",
]

#: Smallest batch verified whole. A token costs a table entry its key until the window
#: is judged; batches of a record or two (producers without linger) are decoded instead.
MIN_WHOLE_RECORDS: Final = 8
#: attributes bits that describe the records: codec (0-2) and timestamp type (3).
_RECORDS_ATTRIBUTES: Final = 0x0F
_KEY: Final = struct.Struct(">IiiihqqB")


def batch_key(batch: Batch, position: int, window_ms: int, since: int
              ) -> tuple[str, int] | None:
    """(key, window start) of `batch` if it may be verified whole, else None.

    Eligible: a magic-2 data batch of at least `MIN_WHOLE_RECORDS` records without offset
    gaps, wholly at or past the reader's `position`, with CreateTime timestamps whose base
    and max fall into one window at or after `since` (the audit's first window). The key
    covers the records section's CRC-32C and length and the header fields that describe
    the records; the mirror keeps all of them on the batch path. The records section's CRC
    follows from the batch's own CRC (`core.batches.records_crc`), which the caller has
    checked against the batch's bytes.
    """
    header = batch.header
    if (header is None or header.is_control or header.record_count < MIN_WHOLE_RECORDS
            or not header.contiguous or header.base_offset < position
            or header.log_append_time):
        return None
    window = window_start(header.max_timestamp, window_ms)
    if header.base_timestamp < since or \
            window_start(header.base_timestamp, window_ms) != window:
        return None
    key = blake2b(_KEY.pack(records_crc(batch), len(batch.data) - HEADER_SIZE,
                            header.record_count,
                            header.last_offset_delta,
                            header.attributes & _RECORDS_ATTRIBUTES,
                            header.base_timestamp, header.max_timestamp,
                            header.magic), digest_size=8).hexdigest()
    return key, window


def other_side(side: str) -> str:
    """The audit side ("source" or "target") that is not `side`."""
    return "target" if side == "source" else "source"


def token_value(key: str) -> int:
    """What a batch verified whole adds to its window's checksum (the same on both sides)."""
    return int(key, 16) & MASK


def same_records(a: Batch, b: Batch) -> bool:
    """The records sections of `a` and `b` are byte for byte equal.

    (Comparing two memoryviews goes item by item, about 0.2 GB/s; `bytes.startswith`
    of equal lengths is one memcmp, over 10 GB/s.)"""
    mine, theirs = a.data[HEADER_SIZE:], b.data[HEADER_SIZE:]
    return len(mine) == len(theirs) and bytes(mine).startswith(theirs)


def fold_token(deltas: dict[str, list[int]], tokens: dict[str, dict[str, int]], key: str,
               window: int, count: int) -> None:
    """Fold a batch verified whole: `count` records and its token into window `window`."""
    start = str(window)
    current = deltas.get(start)
    if current is None:
        deltas[start] = [count, token_value(key)]
    else:
        current[0] += count
        current[1] = (current[1] + token_value(key)) & MASK
    keys = tokens.setdefault(start, {})
    keys[key] = keys.get(key, 0) + 1


def unmatched(other: Mapping[str, Mapping[str, int]], own: Mapping[str, Mapping[str, int]],
              claimed: int, window: int, key: str) -> bool:
    """The other side folded token `key` in `window` more often than this side did
    (`own`, from its table entry) and has claimed since (`claimed`, not yet in the table):
    a batch this side reads now pairs with it (a pair whose other half was folded before
    a restart)."""
    start = str(window)
    return int(other.get(start, {}).get(key, 0)) > \
        int(own.get(start, {}).get(key, 0)) + claimed


class State(enum.Enum):
    PENDING = "pending"  # held, waiting for its target copy
    WHOLE = "whole"      # paired: fold the token
    DECODE = "decode"    # fold its records


@dataclass(slots=True, eq=False)
class Held:
    """One batch in a reader's queue, in offset order."""

    #: None for a legacy message set (decoded at once, into `extra`).
    batch: Batch | None
    #: Fetch position the batch was read at (records before it are not this read's).
    position: int
    key: str | None
    window: int
    read_ms: int
    state: State
    #: The decoded records of a legacy message set (then `batch` is None).
    extra: Any = field(default=None)


class Pairing:
    """The batches one flow's two readers hold, each for the other side's reader to pair.

    Either side may read a pair's half first: the readers report on one wall-clock grid,
    so both fetches of a quiet partition are answered in the same moment, and a source
    reader waiting on its previous report reads after the target's. Kept in memory,
    shared by the two readers of a flow in one process (one event loop: a lookup and its
    marking are never interleaved with the other reader's).
    """

    def __init__(self) -> None:
        self._held: dict[tuple[str, str, str], list[Held]] = {}
        self.held_bytes = 0

    def hold(self, side: str, part: str, entry: Held) -> None:
        """Hold `side`'s batch `entry` until the other side pairs it or it is released."""
        assert entry.key is not None and entry.batch is not None
        self._held.setdefault((side, part, entry.key), []).append(entry)
        self.held_bytes += len(entry.batch.data)

    def release(self, side: str, part: str, entry: Held) -> None:
        """Drop `side`'s `entry` (folded, decoded or re-read): nothing pairs with it now."""
        if entry.key is None or entry.batch is None:
            return
        found = self._held.get((side, part, entry.key))
        if found is None:
            return
        for i, other in enumerate(found):
            if other is entry:
                del found[i]
                self.held_bytes -= len(entry.batch.data)
                break
        if not found:
            del self._held[(side, part, entry.key)]

    def match(self, side: str, part: str, key: str, batch: Batch) -> bool:
        """Pair `side`'s `batch` (key `key`) with a pending batch the other side holds of
        equal records, marking that one WHOLE; False when there is none."""
        for entry in self._held.get((other_side(side), part, key), ()):
            if entry.state is State.PENDING and entry.batch is not None \
                    and same_records(entry.batch, batch):
                entry.state = State.WHOLE
                return True
        return False
