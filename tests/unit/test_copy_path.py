"""Which path a partition's records take under `mirrorline.batch.path` (pure logic)."""

from __future__ import annotations

from mirrorline.core.copy_path import MIN_BYTES, MIN_RECORDS, WINDOW, PathChooser


def test_on_and_off_do_not_depend_on_batch_sizes() -> None:
    on, off = PathChooser("on"), PathChooser("off")
    for chooser in (on, off):
        chooser.observe(1, 80)
    assert (on.batches, on.reason) == (True, "mirrorline.batch.path = on")
    assert (off.batches, off.reason) == (False, "mirrorline.batch.path = off")


def test_auto_rebatches_tiny_batches_and_says_why() -> None:
    chooser = PathChooser("auto")
    assert chooser.reason == "no source batch seen yet"
    chooser.observe(1, 120)
    assert not chooser.batches
    assert chooser.reason.startswith("source batches average 1.0 records, 120 B: re-batched")


def test_auto_copies_batches_with_many_records_or_many_bytes() -> None:
    many_records, many_bytes = PathChooser("auto"), PathChooser("auto")
    many_records.observe(MIN_RECORDS, 2000)
    many_bytes.observe(2, MIN_BYTES)
    assert many_records.batches and many_bytes.batches
    assert many_bytes.reason == "source batches average 2.0 records, 8192 B"


def test_auto_does_not_flip_on_one_odd_batch() -> None:
    """A partition near the threshold keeps its path: one small batch among large ones (a
    producer's linger expiring on a quiet moment) moves the average, not the decision."""
    chooser = PathChooser("auto")
    for _ in range(WINDOW):
        chooser.observe(MIN_RECORDS, 4000)
    chooser.observe(1, 100)
    assert chooser.batches
    for _ in range(WINDOW * 4):  # the producer really turned to one-record batches
        chooser.observe(1, 100)
    assert not chooser.batches
    chooser.observe(MIN_RECORDS, 4000)  # one large batch does not bring it back either
    assert not chooser.batches
