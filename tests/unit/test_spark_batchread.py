"""A Spark read task's fetch answer cut into chunk rows on the batch path (pure: Kafka's own
batches from `data/kafka_batches.json`): raw rows for batches copied as they are, record
rows for the others, and where reading continues, within the micro-batch's range."""

from __future__ import annotations

from mirrorline_spark.batchread import ReadCut, cut_range
from mirrorline_spark.records import RawChunk, from_chunks
from test_batch_fetch import answer, case_bytes

from mirrorline.core.acked_runs import extend_runs
from mirrorline.core.batches import split
from mirrorline.core.copy_path import PathChooser


def rows(part: ReadCut) -> list[tuple[str, object, str]]:
    out: list[tuple[str, object, str]] = []
    for row in part.rows:
        for _, chunk, path, reason in from_chunks(row):
            if isinstance(chunk, RawChunk):
                out.append((path, [b.base_offset for b in split(chunk.data).batches], reason))
            else:
                out.append((path, chunk.column(2).to_pylist(), reason))
    return out


def test_batches_go_raw_markers_and_aborted_transactions_are_left_out() -> None:
    """Producer 9 aborts (0-2) then commits (4-5); producer 11 aborts (7-8) around a plain
    batch (9); markers at 3, 6 and 10: under read_committed one raw row carries the two
    batches a reader sees, and reading continues after the last marker."""
    part = cut_range(answer(case_bytes("transactions"), ((9, 0), (11, 7))), 0, "orders", 0,
                     0, 100, PathChooser("on"), read_committed=True, max_batch_bytes=1 << 20)
    assert rows(part) == [("batches", [4, 9], "mirrorline.batch.path = on")]
    assert part.next_offset == 11
    header = part.rows[0].to_pydict()
    assert header["first_offset"] == [4] and header["records"] == [3]


def test_a_range_that_starts_or_ends_inside_a_batch_copies_exactly_its_records() -> None:
    fetched = answer(case_bytes("transactions"))
    ends = cut_range(fetched, 0, "orders", 0, 4, 5, PathChooser("on"), read_committed=False,
                     max_batch_bytes=1 << 20)
    assert rows(ends) == [("records", [4], "the micro-batch ends inside a source batch")]
    assert ends.next_offset == 5
    starts = cut_range(fetched, 0, "orders", 0, 5, 9, PathChooser("on"), read_committed=False,
                       max_batch_bytes=1 << 20)
    assert rows(starts) == [("records", [5], "resuming inside a source batch"),
                            ("batches", [7], "mirrorline.batch.path = on")]
    assert starts.next_offset == 9


def test_a_batch_larger_than_the_target_takes_goes_as_records() -> None:
    part = cut_range(answer(case_bytes("transactions")), 0, "orders", 0, 0, 3,
                     PathChooser("on"), read_committed=False, max_batch_bytes=10)
    (path, offsets, reason), = rows(part)
    assert (path, offsets) == ("records", [0, 1, 2]) and "max.request.size" in reason


def test_acknowledged_batches_join_into_runs_where_both_sides_continue() -> None:
    runs = [(0, 3, 100)]
    extend_runs(runs, [(3, 2, 103), (6, 1, 105), (7, 2, 110)])
    assert runs == [(0, 5, 100), (6, 1, 105), (7, 2, 110)]
