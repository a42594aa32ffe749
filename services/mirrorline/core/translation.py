"""Translate a consumer group's committed source offset to the target (offset map, then syncs).

Mirrorline's dense offset map (:mod:`mirrorline.core.offset_map`) answers first; when it has no
history for the offset (copied before the map existed, or aged out) MM2's sparse offset syncs
(:class:`~mirrorline.core.offset_sync_store.OffsetSyncStore`) answer with MM2's
conservative rule.  Neither ever answers an offset at which a consumer would skip a record:

* offset map: see :meth:`OffsetMap.locate` -- exact, except beyond where replication had
  reached (``g > mapped_until``), which is bounded by ``g - mapped_until`` duplicates;
* offset sync ``s`` (the newest retained one with ``s.up <= g``): ``g == s.up`` -> ``s.down``;
  otherwise ``s.down + 1``: the records ``s.up + 1 .. g - 1`` may have landed at or after
  ``s.down + 1``, so at most ``g - s.up - 1`` records are seen twice.  With no such record
  (``g == s.up + 1``, typical for a group caught up with a quiet topic) the answer is exact.

When neither can translate (MM2's "too old" -1 and "not ready" None) :func:`translate` returns
None and :func:`why_not` says why, for operators.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from mirrorline.core.offset_map import OffsetMap
from mirrorline.core.offset_sync_store import OffsetSyncStore

__all__ = ["BASIS_OFFSET_MAP", "BASIS_OFFSET_SYNC", "Translation", "translate", "why_not"]

BASIS_OFFSET_MAP: Final = "offset map"
BASIS_OFFSET_SYNC: Final = "offset sync"


@dataclass(frozen=True)
class Translation:
    """A committed source offset and where a consumer resumes on the target.

    ``exact``: the consumer sees every record once from ``downstream_offset``; otherwise at
    most ``max_duplicates`` records it already consumed are seen again (none is skipped).
    ``basis``: ``"offset map"``, ``"offset sync"`` or an explanation.
    """

    upstream_offset: int
    downstream_offset: int
    exact: bool
    max_duplicates: int
    basis: str


def translate(
    g: int, *, topic: str, partition: int, offset_map: OffsetMap, syncs: OffsetSyncStore
) -> Translation | None:
    """Translate committed source offset ``g`` of ``topic``-``partition``, or None.

    None for a negative ``g`` (no committed offset) and when neither the offset map nor the
    offset syncs can translate it; :func:`why_not` explains the latter.
    """
    if g < 0:
        return None
    located = offset_map.locate(topic, partition, g)
    if located is not None:
        return Translation(g, located.downstream, located.exact, located.max_duplicates,
                           BASIS_OFFSET_MAP)
    sync = syncs.lookup(topic, partition, g)
    if sync is None:
        return None
    if g == sync.upstream_offset:
        return Translation(g, sync.downstream_offset, True, 0, BASIS_OFFSET_SYNC)
    duplicates = g - sync.upstream_offset - 1
    return Translation(g, sync.downstream_offset + 1, duplicates == 0, duplicates,
                       BASIS_OFFSET_SYNC)


def why_not(
    g: int, *, topic: str, partition: int, offset_map: OffsetMap, syncs: OffsetSyncStore
) -> str:
    """Why :func:`translate` returns None for ``g`` (empty string when it translates)."""
    tp = f"{topic}-{partition}"
    if g < 0:
        return f"{tp}: no committed offset"
    if translate(g, topic=topic, partition=partition, offset_map=offset_map,
                 syncs=syncs) is not None:
        return ""
    return (
        f"{tp}: cannot translate offset {g}: {_map_reason(topic, partition, offset_map)}; "
        f"{_sync_reason(topic, partition, syncs)}"
    )


def _map_reason(topic: str, partition: int, offset_map: OffsetMap) -> str:
    mapped_until = offset_map.mapped_until(topic, partition)
    if mapped_until is None:
        return "the offset map has nothing for this partition"
    runs = offset_map.runs(topic, partition)
    first = runs[0].upstream_start if runs else mapped_until
    return f"it is older than the offset map's history (which starts at {first})"


def _sync_reason(topic: str, partition: int, syncs: OffsetSyncStore) -> str:
    if not syncs.is_ready:
        return (
            "the offset syncs are not ready (the offset-syncs topic has not been read to its "
            "end yet)"
        )
    retained = syncs.retained(topic, partition)
    if not retained:
        return "no offset sync has been seen for this partition"
    oldest = min(s.upstream_offset for s in retained)
    return f"it is older than every retained offset sync (the oldest is at {oldest})"
