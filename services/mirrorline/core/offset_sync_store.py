"""MM2's OffsetSyncStore: the offset-sync history and the translation rule.

The checkpoint side must translate a group's committed upstream offset into a downstream offset
without ever skipping data.  The offset-syncs topic only keeps the latest sync per partition after
compaction, and keeping every sync read would grow without bound, so per upstream partition a
fixed array of 64 slots keeps syncs spaced roughly exponentially back in time: recent offsets
translate precisely, old ones coarsely.

Behaviour (including which syncs survive) must match Java MM2 bit for bit, because checkpoints
written by either implementation land on the same compacted topic and are compared against each
other.  Three details matter for that and are easy to get wrong:

* slots are compared by **identity** (``is``): the same sync object may occupy several slots and
  two syncs with equal offsets are still different entries;
* the invariant predicates use Java ``long`` arithmetic, so their bounds wrap around at 2**63;
* arrays are copy-on-write: an update builds a new list from the published one and then
  replaces it, so a reader holding the old list never sees a half-repaired history.
"""

from __future__ import annotations

from collections.abc import Sequence

from mirrorline.core.wire import OffsetSync

__all__ = ["SLOTS", "OffsetSyncStore"]

#: Slots per partition (the bit width of a Java long: slot i covers offsets about 2**i back).
SLOTS = 64

_Key = tuple[str, int]
_I64_MAX = (1 << 63) - 1
_U64 = 1 << 64
#: Invariant B's bound offset 2**j - 2**i for slots i < j.
_B_DELTA = tuple(tuple((1 << j) - (1 << i) for j in range(SLOTS)) for i in range(SLOTS))
#: Invariant C's minimum spacing 2**max(i - 2, 0) after slot i.
_C_DELTA = tuple(1 << max(i - 2, 0) for i in range(SLOTS))


def _ok_b(x: OffsetSync, y: OffsetSync, i: int, j: int) -> bool:
    """Invariant B between slots i < j: slot i is not too new relative to slot j.

    A bound that overflows a Java long (wraps negative) counts as satisfied.
    """
    if x is y:
        return True
    bound = y.upstream_offset + _B_DELTA[i][j]
    if bound > _I64_MAX:  # the delta is positive, so a long can only overflow upwards
        bound -= _U64
    return bound < 0 or x.upstream_offset <= bound


def _ok_c(x: OffsetSync, y: OffsetSync, i: int) -> bool:
    """Invariant C between slot i and a later slot: distinct syncs are far enough apart.

    A bound that overflows a Java long (wraps negative) counts as violated.
    """
    if x is y:
        return True
    bound = y.upstream_offset + _C_DELTA[i]
    if bound > _I64_MAX:
        bound -= _U64
    return bound >= 0 and x.upstream_offset >= bound


def _repair(slots: list[OffsetSync], old: Sequence[OffsetSync], new: OffsetSync) -> None:
    """Put ``new`` at the head of ``slots`` (a copy of ``old``) and restore the invariants.

    Walking from slot 1 towards older slots, each slot that became too recent relative to its
    predecessor is refilled with the best-fitting sync from ``old`` (scanned oldest-last with a
    single cursor), so as much older history as possible is kept; the walk stops as soon as the
    rest of the array is already valid.
    """
    slots[0] = new
    candidate = new
    k = 0
    for c in range(1, SLOTS):
        p = c - 1
        while True:
            o = old[k]
            recent = _ok_b(slots[p], o, p, c)
            far_from_prev = _ok_c(slots[p], o, p)
            far_from_next = c + 1 >= SLOTS or _ok_c(o, slots[c + 1], c)
            duplicate = k + 1 < SLOTS and old[k + 1] is o
            fits = recent and far_from_prev and far_from_next
            if fits:
                candidate = o
            skip = duplicate or not far_from_prev
            if fits or skip:
                k += 1
            if not (k < c and skip):
                break
        if _ok_b(slots[p], slots[c], p, c):
            break
        slots[c] = candidate


class OffsetSyncStore:
    """Offset-sync history per upstream partition plus the conservative translation rule.

    Lifecycle, mirroring MirrorCheckpointTask's start: :meth:`start_initial_read`, then
    :meth:`add` for every record of the offset-syncs topic up to its end, then
    :meth:`finish_initial_read`; afterwards keep calling :meth:`add` while tailing the topic.
    Translation answers None until the initial read has finished, so nothing is translated from a
    partially read history.

    Syncs added before :meth:`start_initial_read` are treated like an initial read that must read
    to the end (only the last one per partition is kept), which is the safe default.
    """

    def __init__(self) -> None:
        self._syncs: dict[_Key, list[OffsetSync]] = {}
        self._must_read_to_end = True
        self._ready = False

    def start_initial_read(self, must_read_to_end: bool) -> None:
        """Begin reading the topic from the beginning.

        ``must_read_to_end`` is true when the checkpoints topic could not be loaded: then only
        the last sync per partition from the existing topic is kept, so no checkpoint can be
        translated below one emitted before the restart.
        """
        self._must_read_to_end = must_read_to_end

    def finish_initial_read(self) -> None:
        """The initial read reached the end of the topic once; translation may start."""
        self._ready = True

    @property
    def is_ready(self) -> bool:
        return self._ready

    @property
    def must_read_to_end(self) -> bool:
        return self._must_read_to_end

    def add(self, sync: OffsetSync) -> None:
        """Fold one consumed offset-sync record into its partition's history.

        Pass a fresh object per record: identity is what distinguishes entries.
        """
        key = sync.topic_partition
        old = self._syncs.get(key)
        if old is None:
            self._syncs[key] = [sync] * SLOTS
            return
        loading_latest_only = not self._ready and self._must_read_to_end
        if loading_latest_only or sync.upstream_offset < old[0].upstream_offset:
            # Loading only the latest sync, or the upstream partition was rewound (e.g. the
            # topic was recreated): earlier history says nothing about the new offsets.
            self._syncs[key] = [sync] * SLOTS
            return
        slots = list(old)
        _repair(slots, old, sync)
        self._syncs[key] = slots

    def _latest(self, slots: Sequence[OffsetSync], upstream_offset: int) -> OffsetSync:
        for sync in slots:
            if sync.upstream_offset <= upstream_offset:
                return sync
        return slots[SLOTS - 1]

    def translate_downstream(self, topic: str, partition: int, upstream_offset: int) -> int | None:
        """Translate a committed upstream offset to the downstream offset to resume from.

        None: not ready yet, or no sync seen for the partition.  -1: the offset is older than
        every retained sync (cannot be translated safely).  Otherwise the sync's downstream
        offset when the offset is exactly a sync point, else one past it: how many records
        between the sync and ``upstream_offset`` really reached the target is unknown
        (filtering, compaction, transaction markers), so translating further could skip data.
        """
        if not self._ready or (topic, partition) not in self._syncs:
            return None
        sync = self.lookup(topic, partition, upstream_offset)
        if sync is None:
            return -1
        if sync.upstream_offset == upstream_offset:
            return sync.downstream_offset
        return sync.downstream_offset + 1

    def lookup(self, topic: str, partition: int, upstream_offset: int) -> OffsetSync | None:
        """The retained sync :meth:`translate_downstream` bases its answer on.

        None exactly when that answer is None (not ready, no history) or -1 (the offset is
        older than every retained sync); otherwise the newest retained sync at or below
        ``upstream_offset``.
        """
        if not self._ready:
            return None
        slots = self._syncs.get((topic, partition))
        if slots is None:
            return None
        sync = self._latest(slots, upstream_offset)
        if sync.upstream_offset > upstream_offset:
            return None
        return sync

    def retained(self, topic: str, partition: int) -> list[OffsetSync]:
        """Distinct syncs kept for the partition, newest first (empty if none)."""
        slots = self._syncs.get((topic, partition), [])
        distinct: list[OffsetSync] = []
        seen: set[int] = set()  # object ids: identity, not value (all are alive in `slots`)
        for sync in slots:
            if id(sync) not in seen:
                seen.add(id(sync))
                distinct.append(sync)
        return distinct

    def slots(self, topic: str, partition: int) -> tuple[OffsetSync, ...] | None:
        """The raw 64-slot array for the partition (diagnostics and invariant tests)."""
        slots = self._syncs.get((topic, partition))
        return None if slots is None else tuple(slots)

    def partitions(self) -> list[tuple[str, int]]:
        """Upstream partitions that have a history."""
        return list(self._syncs)
