"""The tail matcher: where a partition resumes, judged from what the target holds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from mirrorline.core.tail_match import (
    Anchor,
    Duplicate,
    Landed,
    Verdict,
    already_landed,
    decide,
    match_tail,
    same_record,
)


@dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: Sequence[tuple[str, bytes]] = field(default_factory=tuple)
    timestamp_type: int = 0


def source(offsets: Sequence[int]) -> list[Rec]:
    """Source records: the content is derived from the offset, so copies are recognisable."""
    return [Rec(o, f"k{o}".encode(), f"v{o}".encode(), 1_700_000_000_000 + o,
                (("h", f"{o}".encode()),)) for o in offsets]


def copies(records: Sequence[Rec], at: int) -> list[Rec]:
    """The same records as they land on the target from target offset `at`."""
    return [Rec(at + i, r.key, r.value, r.timestamp, tuple(r.headers))
            for i, r in enumerate(records)]


ANCHOR = Anchor(source_offset=100, target_offset=40, basis="offset map")


def test_clean_tail_resumes_right_after_the_last_copied_record() -> None:
    src = source(range(100, 131))
    match = match_tail(ANCHOR, copies(src[:21], 40), src)
    assert match.ok and match.resume_offset == 121
    assert match.matched == 21 and match.duplicates == ()
    assert match.last_target_offset == 60 and match.next_source_offset == 121


def test_only_the_anchor_on_the_target_resumes_after_the_anchor() -> None:
    src = source(range(100, 103))
    match = match_tail(ANCHOR, copies(src[:1], 40), src)
    assert match.resume_offset == 101 and match.next_source_offset == 101


def test_empty_tail_means_the_mapped_record_is_gone() -> None:
    match = match_tail(ANCHOR, [], source(range(100, 103)))
    assert not match.ok and "no longer on the target" in match.reason


def test_a_retried_batch_on_the_target_is_recognised_and_reported() -> None:
    src = source(range(100, 140))
    # 100..119 landed, the batch 110..119 was written a second time, then 120..124.
    landed = src[:20] + src[10:20] + src[20:25]
    match = match_tail(ANCHOR, copies(landed, 40), src)
    assert match.resume_offset == 125
    assert match.duplicates == tuple(Duplicate(60 + i, 110 + i) for i in range(10))
    assert match.last_target_offset == 40 + len(landed) - 1


def test_a_retried_batch_at_the_very_end_is_recognised() -> None:
    src = source(range(100, 140))
    landed = src[:20] + src[15:20]
    match = match_tail(ANCHOR, copies(landed, 40), src)
    assert match.resume_offset == 120 and len(match.duplicates) == 5
    assert match.last_target_offset == 59 and match.next_source_offset == 120


def test_a_foreign_record_in_the_tail_cannot_be_matched() -> None:
    src = source(range(100, 140))
    foreign = Rec(0, b"someone", b"else", 5)
    landed = [*copies(src[:5], 40), Rec(45, foreign.key, foreign.value, 5), *copies(src[5:8], 46)]
    match = match_tail(ANCHOR, landed, src)
    assert not match.ok
    assert "target offset 45" in match.reason and "someone else" in match.reason


def test_gaps_in_source_offsets_are_matched_by_position() -> None:
    # Compaction and transaction markers leave holes in the source's offsets.
    src = source([100, 101, 105, 106, 107, 200, 201, 300])
    match = match_tail(ANCHOR, copies(src[:6], 40), src)
    assert match.resume_offset == 201 and match.next_source_offset == 201


def test_the_anchor_must_be_what_the_map_says() -> None:
    src = source(range(100, 110))
    wrong = copies(source(range(500, 510)), 40)
    match = match_tail(ANCHOR, wrong, src)
    assert not match.ok and "does not hold source offset 100" in match.reason


def test_a_source_that_lost_the_anchor_record_cannot_be_matched() -> None:
    match = match_tail(ANCHOR, copies(source([100, 101]), 40), source([150, 151, 152]))
    assert not match.ok and "source offset 100 no longer exists" in match.reason


def test_more_on_the_target_than_the_source_has() -> None:
    src = source(range(100, 103))
    match = match_tail(ANCHOR, copies(src + source([103]), 40), src)
    assert not match.ok and "beyond the source's end" in match.reason


def test_every_compared_field_matters() -> None:
    base = Rec(1, b"k", b"v", 10, (("a", b"1"),))
    assert same_record(base, base)
    assert not same_record(Rec(1, b"x", b"v", 10, (("a", b"1"),)), base)
    assert not same_record(Rec(1, b"k", None, 10, (("a", b"1"),)), base)
    assert not same_record(Rec(1, b"k", b"v", 11, (("a", b"1"),)), base)
    assert not same_record(Rec(1, b"k", b"v", 10, (("a", b"2"),)), base)
    assert not same_record(Rec(1, b"k", b"v", 10, ()), base)
    # A timestamp the target broker stamped itself cannot be compared.
    assert same_record(Rec(1, b"k", b"v", 99, (("a", b"1"),), timestamp_type=1), base)


# -- decisions -------------------------------------------------------------------------

def test_matched_tail_beyond_progress_avoids_the_duplicates() -> None:
    src = source(range(100, 140))
    match = match_tail(ANCHOR, copies(src[:30], 40), src)
    point = decide("t-0", progress=110, match=match)
    assert point.verdict is Verdict.MATCHED and point.offset == 130
    assert "20 offsets beyond durable progress 110" in point.message


def test_forged_progress_ahead_of_the_target_stops_the_partition() -> None:
    src = source(range(100, 160))
    match = match_tail(ANCHOR, copies(src[:20], 40), src)  # the target holds up to 119
    point = decide("orders-1", progress=151, match=match)
    assert point.verdict is Verdict.STOP and point.offset is None
    assert "source offset 120 is not" in point.message and "orders-1" in point.message


def test_progress_beyond_a_gap_is_not_mistaken_for_forgery() -> None:
    # 100..119 copied; 120..124 are transaction markers; progress 125 is the truth.
    src = source([*list(range(100, 120)), 125, 126])
    match = match_tail(ANCHOR, copies(src[:20], 40), src)
    point = decide("t-0", progress=125, match=match)
    assert point.verdict is Verdict.MATCHED and point.offset == 125


def test_unmatched_tail_falls_back_to_progress_loudly() -> None:
    point = decide("t-3", progress=77, match=match_tail(ANCHOR, [], source([100])))
    assert point.verdict is Verdict.FALLBACK and point.offset == 77
    assert "t-3" in point.message and "durable progress 77" in point.message


def test_no_anchor_uses_progress() -> None:
    point = decide("t-0", progress=5, match=None)
    assert point.verdict is Verdict.PROGRESS and point.offset == 5 and point.message
    fresh = decide("t-0", progress=None, match=None)
    assert fresh.offset is None and fresh.message == ""


def test_duplicates_are_reported_in_the_decision() -> None:
    src = source(range(100, 140))
    match = match_tail(ANCHOR, copies(src[:20] + src[18:20], 40), src)
    point = decide("t-0", progress=None, match=match)
    assert point.offset == 120 and len(point.duplicates) == 2
    assert "holds 2 records twice" in point.message


# -- a failed produce: did it land anyway? ---------------------------------------------

def test_a_failed_batch_that_did_not_land() -> None:
    assert already_landed([], source(range(10, 20))) == Landed(0, None, 0)


def test_a_failed_batch_that_landed_in_part_or_whole() -> None:
    batch = source(range(10, 20))
    assert already_landed(copies(batch[:4], 70), batch) == Landed(4, 70, 0)
    assert already_landed(copies(batch, 70), batch) == Landed(10, 70, 0)


def test_a_failed_batch_the_client_had_retried_itself() -> None:
    batch = source(range(10, 20))
    landed = already_landed(copies(batch + batch, 70), batch)
    assert landed == Landed(10, 80, 10)


def test_something_else_after_the_known_end() -> None:
    batch = source(range(10, 20))
    assert already_landed(copies(source([99]), 70), batch) is None
