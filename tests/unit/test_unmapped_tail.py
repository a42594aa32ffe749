"""A remote partition with no exactly mapped point, matched from its start (pure rule).

The gap it closes: the first copies of a partition landed, the owner crashed before the
first offset sync or offset-map run was written; the next owner must not copy them again,
and must never skip a source record the target lacks.
"""

from __future__ import annotations

from test_tail_match import Rec, copies, source

from mirrorline.core.tail_match import Verdict, decide
from mirrorline.core.unmapped_tail import (
    UnmappedStart,
    match_from_start,
    starts_at_source_start,
    unmapped_start,
)

EARLIEST = UnmappedStart(None)


def test_where_an_owner_would_start_without_a_match() -> None:
    assert unmapped_start(42, "latest") == UnmappedStart(42)  # progress wins over reset
    assert unmapped_start(42, "earliest") == UnmappedStart(42)
    assert unmapped_start(None, "earliest") == EARLIEST
    assert unmapped_start(None, " Earliest ") == EARLIEST
    assert unmapped_start(None, "none") == EARLIEST  # the starter treats it as earliest
    # `latest` without progress has no defined start (the source's end moves on).
    assert unmapped_start(None, "latest") is None
    assert unmapped_start(None, "LATEST") is None
    assert starts_at_source_start("earliest") and not starts_at_source_start("latest")


def test_first_copies_of_a_fresh_partition_are_not_copied_again() -> None:
    src = source(range(0, 20))
    match = match_from_start(EARLIEST, copies(src[:5], 0), src[:6])
    assert match is not None and match.ok
    assert match.resume_offset == 5 and match.next_source_offset == 5
    assert match.target_end == 5 and match.last_target_offset == 4
    point = decide("orders-0", progress=None, match=match)
    assert point.verdict is Verdict.MATCHED and point.offset == 5 and point.target_end == 5
    assert "matched from the remote partition's start" in point.message


def test_an_empty_remote_partition_leaves_the_start_as_it_was() -> None:
    assert match_from_start(EARLIEST, [], source(range(3))) is None
    point = decide("orders-0", progress=None, match=None)
    assert point.verdict is Verdict.PROGRESS and point.offset is None


def test_the_source_start_is_the_first_record_from_durable_progress() -> None:
    # Progress 100; offsets 100..102 hold no records (transaction markers, compaction).
    src = source([103, 104, 107, 108, 109])
    match = match_from_start(UnmappedStart(100), copies(src[:3], 0), src)
    assert match is not None and match.resume_offset == 108
    point = decide("t-1", progress=100, match=match)
    assert point.verdict is Verdict.MATCHED and point.offset == 108


def test_a_remote_log_start_beyond_zero_is_matched_from_its_first_readable_record() -> None:
    # Retention (or a deletion) on the target moved its log start to 30.
    src = source(range(500, 520))
    match = match_from_start(EARLIEST, copies(src[:7], 30), src[:8])
    assert match is not None and match.resume_offset == 507
    assert match.last_target_offset == 36 and match.target_end == 37


def test_a_foreign_first_record_falls_back_to_where_the_owner_would_start() -> None:
    src = source(range(0, 10))
    foreign = [Rec(0, b"someone", b"else", 5), *copies(src[:3], 1)]
    match = match_from_start(EARLIEST, foreign, src)
    assert match is not None and not match.ok
    assert "target offset 0" in match.reason and "not a copy of source offset 0" in match.reason
    point = decide("orders-2", progress=None, match=match)
    assert point.verdict is Verdict.FALLBACK and point.offset is None
    assert "orders-2" in point.message and "no exactly mapped point" in point.message
    with_progress = decide("orders-2", progress=4, match=match)
    assert with_progress.verdict is Verdict.FALLBACK and with_progress.offset == 4


def test_a_remote_topic_that_holds_older_copies_is_not_matched_against_progress() -> None:
    # Everything up to 50 was copied (by MM2, say) and progress is 50, but nothing maps it:
    # the remote partition starts with source offset 0, not with 50.
    src_from_progress = source(range(50, 60))
    match = match_from_start(UnmappedStart(50), copies(source(range(0, 50)), 0),
                             src_from_progress)
    assert match is not None and not match.ok
    assert decide("t-0", progress=50, match=match).offset == 50


def test_a_foreign_record_after_matching_copies_falls_back() -> None:
    src = source(range(0, 10))
    landed = [*copies(src[:3], 0), Rec(3, b"someone", b"else", 5)]
    match = match_from_start(EARLIEST, landed, src)
    assert match is not None and not match.ok and "target offset 3" in match.reason


def test_records_on_the_target_but_none_on_the_source() -> None:
    match = match_from_start(UnmappedStart(10), copies(source([3]), 0), [])
    assert match is not None and not match.ok
    assert "durable progress 10" in match.reason


def test_more_copies_than_the_source_holds_from_the_start() -> None:
    src = source(range(0, 3))
    match = match_from_start(EARLIEST, copies(source(range(0, 4)), 0), src)
    assert match is not None and not match.ok and "beyond the source's end" in match.reason


def test_a_batch_written_twice_in_the_first_copies_is_reported() -> None:
    src = source(range(0, 10))
    landed = src[:4] + src[2:4] + src[4:5]
    match = match_from_start(EARLIEST, copies(landed, 0), src)
    assert match is not None and match.resume_offset == 5 and len(match.duplicates) == 2
    assert "holds 2 records twice" in decide("t-0", progress=None, match=match).message


def test_a_match_never_skips_a_source_record_the_target_lacks() -> None:
    """Every layout of a short remote partition: whatever is decided, each source record
    below the start offset is on the target (or lies before the owner's start)."""
    src = source(range(0, 6))
    layouts: list[list[Rec]] = [[]]
    for n in range(1, 5):
        for first in range(0, 3):
            layouts.append(src[first:first + n])
            layouts.append(src[first:first + n - 1] + src[first + n:first + n + 1])  # a gap
    for layout in layouts:
        target = copies(layout, 0)
        match = match_from_start(EARLIEST, target, src)
        point = decide("t-0", progress=None, match=match)
        if point.offset is None:
            continue  # the reset policy: copy from the source's first record
        on_target = {(r.key, r.value) for r in target}
        missing = [r.offset for r in src if r.offset < point.offset
                   and (r.key, r.value) not in on_target]
        assert missing == [], f"layout {[r.offset for r in layout]} skips {missing}"
