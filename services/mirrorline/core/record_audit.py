"""The audit: per window of record timestamps, a count and a checksum of each side.

A mirror that drops, duplicates or alters records keeps every offset-based monitor
green. The audit notices by summarising, per partition and per window of *source record
timestamps* (the mirror preserves them, so the windows line up), everything each side
holds: how many records and an order-independent checksum over key, value, headers and
timestamp. The two summaries are computed independently -- from the source and from the
target -- and compared once both sides are complete.

The checksum of a record is a 64-bit BLAKE2b digest of an unambiguous encoding of it;
a window's checksum is the sum of its records' digests modulo 2^64. Addition makes it
order-independent (records of a window may be read in any order and across restarts)
and incremental (a window is folded in as records arrive); a 64-bit digest per record
makes an accidental match of different contents vanishingly unlikely. Equal counts with
different checksums therefore mean altered contents (CORRUPTED); differing counts mean
records missing or duplicated.

Completion: a side is complete for a window once its reader was caught up (at the high
watermark) at a wall-clock time at or after the window's end plus `grace_ms`; the grace
covers replication lag. A record whose timestamp falls into a window already judged is
late: it is counted, never re-judged.

Everything here is pure and JSON-friendly, so the service can keep it in changelog-backed
tables.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any, Final

__all__ = [
    "MASK",
    "Side",
    "Verdict",
    "WindowVerdict",
    "checksum",
    "judge",
    "record_digest",
    "window_start",
]

MASK: Final = (1 << 64) - 1
_I32: Final = struct.Struct(">i")
_NULL: Final = _I32.pack(-1)
_HEAD: Final = struct.Struct(">qii")


def _field(data: bytes | None) -> bytes:
    return _NULL if data is None else _I32.pack(len(data)) + data


def record_digest(key: bytes | None, value: bytes | None,
                  headers: Sequence[tuple[str, bytes | None]], timestamp: int) -> int:
    """64-bit digest of one record; any changed byte of any part changes it.

    The encoding length-prefixes every part (null distinct from empty) and keeps the
    header order, so no two different records encode alike. The common case (no headers)
    is one struct pack and one concatenation: this runs once per record on both sides.
    """
    data = _HEAD.pack(timestamp, -1 if key is None else len(key),
                      -1 if value is None else len(value)) + (key or b"") + (value or b"")
    if headers:
        data += b"".join(_field(name.encode()) + _field(v) for name, v in headers)
    data += _I32.pack(len(headers))
    return int.from_bytes(blake2b(data, digest_size=8).digest(), "big")


def checksum(digests: Iterable[int]) -> int:
    """Order-independent combination of record digests (sum modulo 2^64)."""
    return sum(digests) & MASK


def window_start(timestamp: int, window_ms: int) -> int:
    return timestamp - timestamp % window_ms


class Verdict(enum.Enum):
    OK = "OK"
    MISSING = "MISSING"
    DUPLICATED = "DUPLICATED"
    CORRUPTED = "CORRUPTED"
    UNVERIFIABLE = "UNVERIFIABLE"


@dataclass(frozen=True)
class WindowVerdict:
    verdict: Verdict
    #: Records missing (MISSING) or extra (DUPLICATED); 0 otherwise.
    count: int
    source_count: int
    target_count: int
    reason: str

    def __str__(self) -> str:
        return f"{self.verdict.value} {self.count}" if self.count else self.verdict.value


def judge(source: tuple[int, int], target: tuple[int, int], *,
          source_truncated: bool = False) -> WindowVerdict:
    """Compare (count, checksum) of both sides of one window.

    `source_truncated`: the source's retention removed records of this window before they
    were read, so the source side is incomplete by no fault of the mirror.
    """
    (s_count, s_sum), (t_count, t_sum) = source, target
    if source_truncated and t_count > s_count:
        return WindowVerdict(Verdict.UNVERIFIABLE, 0, s_count, t_count,
                             "the source's retention removed records of this window "
                             "before they could be read")
    if s_count == t_count:
        if s_sum == t_sum:
            return WindowVerdict(Verdict.OK, 0, s_count, t_count,
                                 f"{s_count} records, checksums equal")
        return WindowVerdict(Verdict.CORRUPTED, 0, s_count, t_count,
                             f"{s_count} records on both sides, checksums differ")
    if t_count < s_count:
        return WindowVerdict(Verdict.MISSING, s_count - t_count, s_count, t_count,
                             f"source has {s_count} records, target {t_count}")
    return WindowVerdict(Verdict.DUPLICATED, t_count - s_count, s_count, t_count,
                         f"target has {t_count} records, source {s_count}")


# --------------------------------------------------------------------------------------------
# Per-partition side state, JSON-shaped for a changelog-backed table


class Side:
    """One side (source or target) of one partition, as a plain dict for the table.

    Keys: ``next`` (next offset to read), ``windows`` ({start: [count, checksum]}),
    ``caught`` (latest wall-clock ms at which the reader was caught up),
    ``judged`` (windows below this start are judged), ``late`` (records that arrived
    for judged windows), ``truncated`` (a source record timestamp: windows before it lost
    records to retention before they were read; -1 if none).
    """

    @staticmethod
    def new(next_offset: int, first_window: int) -> dict[str, Any]:
        return {"next": next_offset, "windows": {}, "caught": -1, "judged": first_window,
                "late": 0, "truncated": -1}

    @staticmethod
    def fold(state: dict[str, Any], deltas: dict[str, list[int]], next_offset: int,
             caught_ms: int, late: int = 0, truncated: int = -1) -> None:
        """Add a batch's per-window (count, checksum) and advance the position."""
        windows: dict[str, list[int]] = state["windows"]
        for start, (count, total) in deltas.items():
            if int(start) < state["judged"]:
                state["late"] += count
                continue
            current = windows.setdefault(start, [0, 0])
            current[0] += count
            current[1] = (current[1] + total) & MASK
        state["late"] += late
        state["next"] = next_offset
        state["caught"] = max(state["caught"], caught_ms)
        if truncated >= 0:
            state["truncated"] = max(state["truncated"], truncated)


def accumulate(deltas: dict[str, list[int]], timestamp: int, digest: int,
               window_ms: int) -> None:
    """Fold one record into a batch's per-window deltas."""
    start = str(timestamp - timestamp % window_ms)
    current = deltas.get(start)
    if current is None:
        deltas[start] = [1, digest]
    else:
        current[0] += 1
        current[1] = (current[1] + digest) & MASK


def closable(source: dict[str, Any], target: dict[str, Any], *, window_ms: int,
             grace_ms: int) -> list[int]:
    """Window starts both sides are complete for, oldest first: every window with
    records on either side (or none) from the first unjudged one up to the latest
    window both readers were caught up past (end + grace)."""
    complete_through = min(source["caught"], target["caught"]) - grace_ms
    first = max(source["judged"], target["judged"])
    starts = {int(s) for s in source["windows"]} | {int(s) for s in target["windows"]}
    return sorted(s for s in starts if s >= first and s + window_ms <= complete_through)


def close(source: dict[str, Any], target: dict[str, Any], start: int,
          window_ms: int) -> WindowVerdict:
    """Judge window `start` and drop it from both sides' state."""
    key = str(start)
    s = source["windows"].pop(key, [0, 0])
    t = target["windows"].pop(key, [0, 0])
    truncated = source["truncated"] >= 0 and start < source["truncated"]
    for side in (source, target):
        side["judged"] = max(side["judged"], start + window_ms)
    return judge((s[0], s[1]), (t[0], t[1]), source_truncated=truncated)
