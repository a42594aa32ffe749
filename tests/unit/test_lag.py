"""Lag against the source's log end (`mirrorline.core.lag`): pure arithmetic, no broker."""

from __future__ import annotations

from mirrorline.core.lag import UNKNOWN, Lag, LagBook, partition_lag

NOW = 1_000_000.0


def test_caught_up_is_zero_records_and_zero_ms() -> None:
    assert partition_lag(10, 10, None, NOW) == Lag(0, 0.0)
    # A next offset past a lower end (a source that lost records) is not negative lag.
    assert partition_lag(8, 10, None, NOW) == Lag(0, 0.0)


def test_time_lag_is_the_age_of_the_oldest_record_not_copied() -> None:
    assert partition_lag(25, 10, int(NOW) - 4_000, NOW) == Lag(15, 4_000.0)
    assert partition_lag(25, 10, None, NOW) == Lag(15, -1.0)  # behind, age not read yet
    assert partition_lag(25, 10, int(NOW) + 50, NOW) == Lag(15, 0.0)  # clock skew


def test_an_unknown_end_is_unknown_lag_not_zero() -> None:
    assert partition_lag(None, 10, None, NOW) == UNKNOWN
    assert partition_lag(10, -1, None, NOW) == UNKNOWN


def test_a_partition_nobody_fetches_shows_its_backlog_from_the_measured_end() -> None:
    book: LagBook[str] = LagBook()
    book.saw_ends({"p0": 40})
    # The owner's own fetches last said 10 (it was paused since): the measurement wins.
    assert book.lag("p0", 10, NOW, fetched_high=10).records == 30
    # Its own fetch responses are newer than the measurement: they win.
    assert book.lag("p0", 10, NOW, fetched_high=45).records == 35
    assert book.lag("p1", 0, NOW) == UNKNOWN


def test_a_timestamp_is_read_only_when_behind_and_again_when_something_moved() -> None:
    book: LagBook[str] = LagBook()
    book.saw_ends({"behind": 50, "level": 7, "far": 1_000})
    positions = {"behind": 20, "level": 7, "far": 0, "unmeasured": 3}
    assert book.stamps_wanted(positions) == {"far": 0, "behind": 20}
    assert list(book.stamps_wanted(positions, limit=1)) == ["far"]  # most behind first

    book.saw_stamp("behind", 20, int(NOW) - 2_500)
    assert book.stamps_wanted(positions) == {"far": 0}
    assert book.lag("behind", 20, NOW) == Lag(30, 2_500.0)
    assert book.lag("behind", 20, NOW + 1_000) == Lag(30, 3_500.0)  # paused: it ages

    # New records on the source: read again (the read's fetch brings the true end).
    book.saw_ends({"behind": 55})
    assert book.stamps_wanted({"behind": 20}) == {"behind": 20}
    book.saw_stamp("behind", 20, int(NOW) - 2_500)
    assert book.stamps_wanted({"behind": 20}) == {}

    # Copying moved on: the old record's age is no longer the oldest's.
    assert book.lag("behind", 25, NOW) == Lag(30, -1.0)
    assert book.stamps_wanted({"behind": 25}) == {"behind": 25}
    # Caught up: nothing to read, and no age.
    assert book.stamps_wanted({"behind": 55}) == {}
    assert book.lag("behind", 55, NOW) == Lag(0, 0.0)


def test_retain_forgets_partitions_let_go() -> None:
    book: LagBook[str] = LagBook()
    book.saw_ends({"a": 5, "b": 5})
    book.saw_stamp("a", 0, 1)
    book.retain(["b"])
    assert book.lag("a", 0, NOW) == UNKNOWN
    assert book.lag("b", 0, NOW) == Lag(5, -1.0)


def test_an_end_never_goes_back() -> None:
    """Tansu answers ListOffsets(latest) with its last batch's base offset + 1, short of
    the high watermark a fetch showed: the shorter answer must not hide the backlog."""
    book: LagBook[str] = LagBook()
    book.saw_ends({"p": 1})    # ListOffsets, short
    book.saw_ends({"p": 10})   # the oldest-record fetch's high watermark
    book.saw_ends({"p": 1})    # ListOffsets again, next round
    assert book.lag("p", 0, NOW).records == 10
