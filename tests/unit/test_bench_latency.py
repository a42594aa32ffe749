"""The pure parts of the bench's steady-rate latency run (`bench/latency.py`).

The figures a user reads in the latency table come from these: the schedule the producer
paces itself against, the percentiles, and the first/last-quarter medians that show a
copier falling behind. No brokers: these are functions of their arguments.
"""

from __future__ import annotations

import math

import pytest

from bench.latency import due, percentile, read_stamp, stamp, summarise


def test_pacing_sends_record_zero_at_once_and_one_more_per_interval() -> None:
    assert due(-0.1, 1000, 50) == 0
    assert due(0.0, 1000, 50) == 1
    # Record i is due at i / rate: 10 ms at 1000/s makes records 0..10 due, not 10.
    assert due(0.010, 1000, 50) == 11
    assert due(0.0109, 1000, 50) == 11
    # Never more than asked for, however late the producer looks.
    assert due(3600.0, 1000, 50) == 50


def test_pacing_spreads_the_records_over_the_duration() -> None:
    # 20 000/s for 60 s: the last record is due at 59.99995 s, none before its time.
    total = 20_000 * 60
    assert due((total - 1) / 20_000 - 1e-6, 20_000, total) == total - 1
    assert due((total - 1) / 20_000, 20_000, total) == total


def test_percentiles_are_nearest_rank() -> None:
    hundred = [float(i) for i in range(1, 101)]
    assert percentile(hundred, 0.5) == 50.0
    assert percentile(hundred, 0.99) == 99.0
    assert percentile(hundred, 1.0) == 100.0
    thousand = [float(i) for i in range(1, 1001)]
    assert percentile(thousand, 0.99) == 990.0
    # One slow record in a hundred is the p99, not hidden below it.
    spiky = [1.0] * 99 + [500.0]
    assert percentile(spiky, 0.99) == 1.0
    assert percentile([1.0] * 98 + [500.0, 500.0], 0.99) == 500.0
    assert percentile([7.0], 0.5) == 7.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 0.5)
    with pytest.raises(ValueError, match="not in"):
        percentile(hundred, 0.0)


def test_a_copier_falling_behind_shows_in_the_last_quarter() -> None:
    # Latency growing by 1 ms per record, in source order: what a copier that cannot keep
    # up with the rate looks like. The summary sorts for percentiles, but the quarters
    # follow the sequence, so the growth shows.
    growing = [float(i) for i in range(400)]
    summary = summarise(growing, duplicates=0, timestamps_kept=400)
    assert summary.first_quarter_p50 == 49.0
    assert summary.last_quarter_p50 == 349.0
    assert summary.last_quarter_p99 == 398.0
    assert summary.max == 399.0
    steady = [5.0] * 400
    flat = summarise(steady, duplicates=0, timestamps_kept=400)
    assert flat.first_quarter_p50 == flat.last_quarter_p50 == 5.0


def test_records_never_seen_are_counted_not_averaged_away() -> None:
    by_sequence = [10.0, math.nan, 30.0, math.nan]
    summary = summarise(by_sequence, duplicates=1, timestamps_kept=0)
    assert (summary.expected, summary.seen, summary.duplicates) == (4, 2, 1)
    assert (summary.p50, summary.max) == (10.0, 30.0)
    nothing = summarise([math.nan] * 3, duplicates=0, timestamps_kept=0)
    assert (nothing.seen, nothing.p50, nothing.p99, nothing.max) == (0, None, None, None)
    assert nothing.last_quarter_p99 is None


def test_the_stamp_survives_in_the_value() -> None:
    value = stamp(b"x" * 100, 1_764_000_000_123)
    assert len(value) == 100
    assert value.startswith(b"1764000000123x")
    assert read_stamp(value) == 1_764_000_000_123
    with pytest.raises(ValueError, match="13-digit stamp"):
        read_stamp(b"not a stamp at all")
