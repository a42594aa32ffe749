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
covers replication lag. A window whose target is then short of records is not judged
yet: a paused or slow mirror has simply not copied them. It is *held*, and judged
  * as soon as the target has as many records as the source: OK, or LATE when records
    reached the target only while it was held (DUPLICATED or CORRUPTED as the sums say);
  * MISSING once the target partition holds a record timestamped at least `grace_ms`
    after the window's end (the mirror copies a partition in order, so the window's
    records would have come before it: they were skipped), or once it has waited
    `missing_after_ms` with nothing later on the target (an idle partition's tail). A
    MISSING window stays held: should its records still arrive, its verdict is replaced
    by LATE (same key), never left standing as a loss.
A record whose timestamp falls into a window already judged (and not held) is late: it
is counted, never re-judged.

Everything here is pure and JSON-friendly, so the service can keep it in changelog-backed
tables.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any, Final, Protocol

__all__ = [
    "MASK",
    "AuditedRecord",
    "Side",
    "Verdict",
    "WindowVerdict",
    "checksum",
    "fold_records",
    "judge",
    "record_digest",
    "settle",
    "window_start",
]

MASK: Final = (1 << 64) - 1
_I32: Final = struct.Struct(">i")
_NULL: Final = _I32.pack(-1)
_HEAD: Final = struct.Struct(">qii")
_NO_HEADERS: Final = _I32.pack(0)


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


class AuditedRecord(Protocol):
    """What the audit reads of a record (aiokafka's decoded records have these)."""

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]]: ...

    @property
    def timestamp(self) -> int: ...


def fold_records(deltas: dict[str, list[int]], records: Sequence[AuditedRecord],
                 window_ms: int, since: int = -1) -> tuple[int, int]:
    """Fold one record batch into per-window `deltas`, as `accumulate(record_digest(...))`
    for each record would; returns (records folded, highest timestamp folded or -1).

    Records timestamped before `since` are left out. The digests are `record_digest`'s,
    bit for bit (what the changelog holds stays comparable across versions), computed
    inline: this runs for every record on both sides and is the audit's main cost. A
    batch whose records all fall into one window -- nearly every batch -- is folded into
    that window once, rather than record by record.
    """
    pack = _HEAD.pack
    from_bytes = int.from_bytes
    stamps: list[int] = []
    digests: list[int] = []
    for record in records:
        timestamp = record.timestamp
        key = record.key
        value = record.value
        headers = record.headers
        if headers:
            digest = record_digest(key, value, headers, timestamp)
        else:
            digest = from_bytes(blake2b(
                pack(timestamp, -1 if key is None else len(key),
                     -1 if value is None else len(value))
                + (key or b"") + (value or b"") + _NO_HEADERS, digest_size=8).digest(), "big")
        stamps.append(timestamp)
        digests.append(digest)
    if not stamps:
        return 0, -1
    low, top = min(stamps), max(stamps)
    if low >= since and low - low % window_ms == top - top % window_ms:
        start = str(low - low % window_ms)
        current = deltas.get(start)
        if current is None:
            deltas[start] = [len(stamps), sum(digests) & MASK]
        else:
            current[0] += len(stamps)
            current[1] = (current[1] + sum(digests)) & MASK
        return len(stamps), top
    folded, top = 0, -1
    for timestamp, digest in zip(stamps, digests, strict=True):
        if timestamp < since:
            continue
        accumulate(deltas, timestamp, digest, window_ms)
        folded += 1
        top = max(top, timestamp)
    return folded, top


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
    #: Every record arrived, some after the window's grace: not a loss.
    LATE = "LATE"


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
    ``judged`` (windows below this start are judged, but for held ones), ``late``
    (records that arrived for judged windows), ``truncated`` (a source record timestamp:
    windows before it lost records to retention before they were read; -1 if none),
    ``top`` (highest record timestamp read; -1 if none) and ``held`` (windows whose
    target was short when they were complete, see `settle`: {start: [held since ms,
    target count then, count reported MISSING or 0]}, the same on both sides) and ``b``
    (per open window, the keys of batches folded whole and how often: {start: {key: n}},
    see `core.batch_audit`).
    """

    @staticmethod
    def new(next_offset: int, first_window: int) -> dict[str, Any]:
        return {"next": next_offset, "windows": {}, "caught": -1, "judged": first_window,
                "late": 0, "truncated": -1, "top": -1, "held": {}, "b": {}}

    @staticmethod
    def fold(state: dict[str, Any], deltas: dict[str, list[int]], next_offset: int,
             caught_ms: int, late: int = 0, truncated: int = -1, top: int = -1,
             tokens: dict[str, dict[str, int]] | None = None) -> None:
        """Add a batch's per-window (count, checksum) and advance the position; `tokens`
        are the keys of the batches among them folded whole, per window."""
        windows: dict[str, list[int]] = state["windows"]
        held: dict[str, list[int]] = state.setdefault("held", {})
        folded: dict[str, dict[str, int]] = state.setdefault("b", {})
        for start, keys in (tokens or {}).items():
            if int(start) < state["judged"] and start not in held:
                continue
            mine = folded.setdefault(start, {})
            for key, times in keys.items():
                mine[key] = mine.get(key, 0) + times
        for start, (count, total) in deltas.items():
            if int(start) < state["judged"] and start not in held:
                state["late"] += count
                continue
            current = windows.setdefault(start, [0, 0])
            current[0] += count
            current[1] = (current[1] + total) & MASK
        state["late"] += late
        state["next"] = next_offset
        state["caught"] = max(state["caught"], caught_ms)
        state["top"] = max(int(state.get("top", -1)), top)
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
    for side in (source, target):
        side.get("b", {}).pop(key, None)
    truncated = source["truncated"] >= 0 and start < source["truncated"]
    for side in (source, target):
        side["judged"] = max(side["judged"], start + window_ms)
    return judge((s[0], s[1]), (t[0], t[1]), source_truncated=truncated)


#: Most windows one partition holds (see `settle`); a held window costs the table entry
#: its sums, written again with every fold.
MAX_HELD: Final = 100


def _late(verdict: WindowVerdict, arrived: int) -> WindowVerdict:
    """An OK verdict of a held window whose `arrived` records came while it was held."""
    return WindowVerdict(Verdict.LATE, arrived, verdict.source_count, verdict.target_count,
                         f"all {verdict.source_count} records arrived, {arrived} of them "
                         "after the window's grace; checksums equal")


def settle(source: dict[str, Any], target: dict[str, Any], now_ms: int, *, window_ms: int,
           grace_ms: int, missing_after_ms: int) -> list[tuple[int, WindowVerdict]]:
    """The verdicts due at `now_ms`, oldest window first, for both sides of one partition;
    windows judged for good are dropped from both sides' state.

    A complete window (see `closable`) whose target is short is held rather than judged:
    its records may merely be late. A held window is judged once the target has caught
    up with the source (OK becomes LATE when records came while it was held), or as
    MISSING once the target partition has moved past it (a record timestamped at least
    `grace_ms` after its end) or it has waited `missing_after_ms`. Only moving past, or
    catching up, ends holding: a MISSING reported after the wait is replaced by LATE if
    the records still come. At most `MAX_HELD` windows are held; beyond that the oldest
    is MISSING for good.
    """
    out: list[tuple[int, WindowVerdict]] = []
    held_s: dict[str, list[int]] = source.setdefault("held", {})
    held_t: dict[str, list[int]] = target.setdefault("held", {})

    def counts(key: str) -> tuple[tuple[int, int], tuple[int, int], bool]:
        s = source["windows"].get(key, [0, 0])
        t = target["windows"].get(key, [0, 0])
        truncated = source["truncated"] >= 0 and int(key) < source["truncated"]
        return (s[0], s[1]), (t[0], t[1]), truncated

    def release(key: str) -> None:
        for side in (source, target):
            side["windows"].pop(key, None)
            side["held"].pop(key, None)
            side.get("b", {}).pop(key, None)

    for start in closable(source, target, window_ms=window_ms, grace_ms=grace_ms):
        key = str(start)
        s, t, truncated = counts(key)
        verdict = judge(s, t, source_truncated=truncated)
        for side in (source, target):
            side["judged"] = max(side["judged"], start + window_ms)
        if verdict.verdict is Verdict.MISSING:
            held_s[key] = [now_ms, t[0], 0]
            held_t[key] = [now_ms, t[0], 0]
            continue
        release(key)
        out.append((start, verdict))
    moved_past = int(target.get("top", -1))
    for key in sorted(list(held_s), key=int):
        start = int(key)
        since, target_then, reported = (int(v) for v in held_s[key])
        s, t, truncated = counts(key)
        verdict = judge(s, t, source_truncated=truncated)
        if verdict.verdict is not Verdict.MISSING:
            if verdict.verdict is Verdict.OK and t[0] > target_then:
                verdict = _late(verdict, t[0] - target_then)
            release(key)
            out.append((start, verdict))
        elif moved_past >= start + window_ms + grace_ms:
            release(key)
            if verdict.count != reported:
                out.append((start, verdict))
        elif not reported and now_ms >= since + missing_after_ms:
            for held in (held_s, held_t):
                held[key] = [since, target_then, verdict.count]
            out.append((start, verdict))
    # A mirror stopped for good must not grow the table entry without end: beyond
    # MAX_HELD, the oldest held window is MISSING for good (said now if not yet).
    for key in sorted(held_s, key=int)[:max(0, len(held_s) - MAX_HELD)]:
        reported = int(held_s[key][2])
        s, t, truncated = counts(key)
        verdict = judge(s, t, source_truncated=truncated)
        release(key)
        if verdict.count != reported:
            out.append((int(key), verdict))
    out.sort(key=lambda found: found[0])
    return out
