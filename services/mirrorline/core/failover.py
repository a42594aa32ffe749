"""Pure planning for the failover commands: readiness, time-based starts, failback divergence.

Nothing here talks to a cluster: the caller gathers log ends, committed offsets, translations
(:func:`mirrorline.core.translation.translate`), checkpoint times and group members, and these
functions decide and explain.

Readiness of a group ("failing over now loses and repeats nothing") requires, per partition
the group uses:

* the source cluster answered (its log end is known) -- otherwise what is not mirrored yet is
  unknown;
* nothing the group has not consumed is missing on the target:
  ``max(0, source_end - max(committed, replicated))`` is 0, where ``replicated`` is where
  replication had reached (the offset map's ``mapped_until``).  An unknown committed offset or
  replicated position counts as 0, so the number is an upper bound then;
* the committed offset (when there is one) translates exactly: a bound adds its
  ``max_duplicates`` to the expected duplicates;

and no member of the group is active on the target (it would race the committed offsets).
Every unmet condition yields one reason naming the topic-partition where relevant.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mirrorline.core.translation import Translation

__all__ = [
    "SOURCE_UNREACHABLE",
    "FlowPartition",
    "FlowReadiness",
    "GroupPartition",
    "GroupReadiness",
    "diverged",
    "first_at_or_after",
    "flow_readiness",
    "group_readiness",
    "verify_time_answer",
]

SOURCE_UNREACHABLE = "the source cluster is unreachable: readiness of unmirrored records unknown"


def _records(n: int) -> str:
    return f"{n} record" if n == 1 else f"{n} records"


@dataclass(frozen=True)
class GroupPartition:
    """One partition of a group, as the caller observed it.

    ``committed``: the group's committed source offset (None: none).  ``source_end``: the
    source log end (high watermark; None when the source is unreachable).  ``replicated``:
    where replication had reached (``mapped_until``; None: unknown).  ``translation``: of
    ``committed`` (None: not translatable; ``why_untranslated`` then says why, e.g. from
    :func:`~mirrorline.core.translation.why_not`).
    """

    topic: str
    partition: int
    target_topic: str
    committed: int | None
    source_end: int | None
    replicated: int | None
    translation: Translation | None
    why_untranslated: str = ""

    @property
    def name(self) -> str:
        """``topic-partition``, as used in reasons."""
        return f"{self.topic}-{self.partition}"

    @property
    def records_not_mirrored(self) -> int | None:
        """Records the group has not consumed that the target does not have (None: unknown)."""
        if self.source_end is None:
            return None
        known = [v for v in (self.committed, self.replicated) if v is not None]
        return max(0, self.source_end - max(known, default=0))


@dataclass(frozen=True)
class GroupReadiness:
    """Whether a group can fail over now, and why not (``reasons`` is empty when safe)."""

    group: str
    safe: bool
    reasons: list[str]
    expected_duplicates: int
    records_not_mirrored: int
    checkpoint_age_ms: int | None  # None: the group has no checkpoint
    active_members: int


def group_readiness(
    group: str,
    partitions: Iterable[GroupPartition],
    *,
    newest_checkpoint_ms: int | None,
    active_members: int,
    now_ms: int,
) -> GroupReadiness:
    """Readiness of one group (conditions in the module docstring).

    ``newest_checkpoint_ms``: time of the group's newest checkpoint (None: none); its age is
    reported (never negative), it is not a condition.  ``active_members``: members of the
    group currently active on the target.
    """
    reasons: list[str] = []
    unreachable = False
    duplicates = 0
    not_mirrored = 0
    for p in partitions:
        t = p.translation
        if t is not None and p.committed is not None and t.upstream_offset != p.committed:
            raise ValueError(f"{p.name}: translation of {t.upstream_offset} given "
                             f"for committed offset {p.committed}")
        missing = p.records_not_mirrored
        if missing is None:
            unreachable = True
        elif missing > 0:
            not_mirrored += missing
            reasons.append(f"{p.name}: {_records(missing)} not mirrored yet")
        if p.committed is None or p.committed < 0:
            continue
        if t is None:
            reasons.append(p.why_untranslated
                           or f"{p.name}: committed offset {p.committed} cannot be translated")
        elif t.max_duplicates > 0:
            duplicates += t.max_duplicates
            reasons.append(f"{p.name}: translation is a bound "
                           f"(up to {_records(t.max_duplicates)} seen twice)")
        elif not t.exact:
            reasons.append(f"{p.name}: translation is not exact")
    if unreachable:
        reasons.insert(0, SOURCE_UNREACHABLE)
    if active_members > 0:
        members = "1 active member" if active_members == 1 else f"{active_members} active members"
        reasons.append(f"group has {members} on the target")
    age = None if newest_checkpoint_ms is None else max(0, now_ms - newest_checkpoint_ms)
    return GroupReadiness(
        group=group,
        safe=not reasons,
        reasons=reasons,
        expected_duplicates=duplicates,
        records_not_mirrored=not_mirrored,
        checkpoint_age_ms=age,
        active_members=active_members,
    )


@dataclass(frozen=True)
class FlowPartition:
    """One source partition of a flow: log end (None: unreachable), replicated, lag in ms."""

    topic: str
    partition: int
    source_end: int | None
    replicated: int | None
    lag_ms: float | None = None

    @property
    def lag_records(self) -> int:
        """``max(0, source_end - replicated)`` (unknown replicated counts as 0; 0 when the
        source is unreachable)."""
        if self.source_end is None:
            return 0
        return max(0, self.source_end - (self.replicated or 0))


@dataclass(frozen=True)
class FlowReadiness:
    """Summary of a flow's failover plan."""

    flow: str
    safe: bool
    lag_records: int
    lag_ms: float  # the largest per-partition lag (0.0 when none is known)
    source_reachable: bool
    groups: list[GroupReadiness]


def flow_readiness(
    flow: str, partitions: Iterable[FlowPartition], groups: Sequence[GroupReadiness]
) -> FlowReadiness:
    """Summarise a flow: replication lag and whether every group is safe.

    Safe iff every group is safe and the source answered for every partition (so a flow whose
    source is down is never reported safe, even with no group to fail over).
    """
    lag_records = 0
    lag_ms = 0.0
    reachable = True
    for p in partitions:
        if p.source_end is None:
            reachable = False
        lag_records += p.lag_records
        if p.lag_ms is not None:
            lag_ms = max(lag_ms, p.lag_ms)
    return FlowReadiness(
        flow=flow,
        safe=reachable and all(g.safe for g in groups),
        lag_records=lag_records,
        lag_ms=lag_ms,
        source_reachable=reachable,
        groups=list(groups),
    )


# -- failover to a point in time ------------------------------------------------------------------


def verify_time_answer(
    candidate: int,
    candidate_ts: int | None,
    previous_ts: int | None,
    target_ms: int,
    log_start: int,
) -> bool:
    """Check a broker's ListOffsets(timestamp) answer locally before committing it.

    ``candidate_ts``: timestamp of the record at ``candidate`` (None: ``candidate`` is the log
    end, no record there).  ``previous_ts``: timestamp of the record at ``candidate - 1`` (None
    when there is none).  Right iff the record at the candidate has ts >= T and either it is
    the first record (``candidate == log_start``) or its predecessor has ts < T; a candidate at
    the log end is right iff the partition is empty or the last record has ts < T.

    This is a necessary condition.  It is sufficient for non-decreasing timestamps; with
    non-monotonic ones an earlier record may still be at or after T (only a scan,
    :func:`first_at_or_after`, decides that), but a wrong answer like "always offset 0" is
    rejected whenever the first record is older than T.
    """
    if candidate < log_start:
        return False
    if candidate_ts is None:
        return candidate == log_start or (previous_ts is not None and previous_ts < target_ms)
    if candidate_ts < target_ms:
        return False
    return candidate == log_start or (previous_ts is not None and previous_ts < target_ms)


def first_at_or_after(records: Iterable[tuple[int, int]], target_ms: int) -> int | None:
    """Offset of the first record, in offset order, whose timestamp is >= ``target_ms``.

    ``records``: ``(offset, timestamp_ms)`` in offset order, as a consumer reads them; the
    scan stops at the first match.  This is Kafka's ListOffsets(timestamp) answer when
    timestamps are not monotonic.  None when no record qualifies (start at the log end).
    Raises ValueError if offsets are not increasing.
    """
    previous: int | None = None
    for offset, ts in records:
        if previous is not None and offset <= previous:
            raise ValueError(f"records out of offset order: {offset} after {previous}")
        if ts >= target_ms:
            return offset
        previous = offset
    return None


# -- failback -------------------------------------------------------------------------------------


def diverged(old_primary_end: int, mirrored_next: int) -> int:
    """Records written on the old primary but never mirrored (``old_primary_end`` minus the
    first offset never mirrored, at least 0)."""
    return max(0, old_primary_end - mirrored_next)
