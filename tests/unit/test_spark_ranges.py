"""What a Spark read task copies of a fetch answer on the batch path, within its
micro-batch's range (pure: Kafka's own batches from `data/kafka_batches.json`): batches
forwarded as they are, records of the others, and where reading continues."""

from __future__ import annotations

from test_batch_fetch import answer, case_bytes

from mirrorline.core.acked_runs import extend_runs
from mirrorline.core.copy_path import PathChooser
from mirrorline.kafka.fetchroute import FetchRoute, route_fetch


def kinds(routed: FetchRoute) -> list[tuple[str, list[int], str]]:
    return [("batches", [r.batch.base_offset], r.reason) if r.records is None
            else ("records", [rec.offset for rec in r.records], r.reason)
            for r in routed.batches]


def test_batches_go_as_they_are_markers_and_aborted_transactions_are_left_out() -> None:
    """Producer 9 aborts (0-2) then commits (4-5); producer 11 aborts (7-8) around a plain
    batch (9); markers at 3, 6 and 10: under read_committed the two batches a reader sees
    are forwarded, and reading continues after the last marker."""
    part = route_fetch(answer(case_bytes("transactions"), ((9, 0), (11, 7))), "orders", 0,
                       0, PathChooser("on"), read_committed=True, max_request_size=1 << 20,
                       end=100)
    assert kinds(part) == [("batches", [4], "mirrorline.batch.path = on"),
                           ("batches", [9], "mirrorline.batch.path = on")]
    assert part.next_offset == 11


def test_a_range_that_starts_or_ends_inside_a_batch_copies_exactly_its_records() -> None:
    fetched = answer(case_bytes("transactions"))
    ends = route_fetch(fetched, "orders", 0, 4, PathChooser("on"), read_committed=False,
                       max_request_size=1 << 20, end=5)
    assert kinds(ends) == [("records", [4], "the micro-batch ends inside a source batch")]
    assert ends.next_offset == 5
    starts = route_fetch(fetched, "orders", 0, 5, PathChooser("on"), read_committed=False,
                         max_request_size=1 << 20, end=9)
    assert kinds(starts) == [("records", [5], "resuming inside a source batch"),
                             ("batches", [7], "mirrorline.batch.path = on")]
    assert starts.next_offset == 9


def test_a_batch_larger_than_the_target_takes_goes_as_records() -> None:
    part = route_fetch(answer(case_bytes("transactions")), "orders", 0, 0, PathChooser("on"),
                       read_committed=False, max_request_size=10, end=3)
    (path, offsets, reason), = kinds(part)
    assert (path, offsets) == ("records", [0, 1, 2]) and "max.request.size" in reason


def test_acknowledged_batches_join_into_runs_where_both_sides_continue() -> None:
    runs = [(0, 3, 100)]
    extend_runs(runs, [(3, 2, 103), (6, 1, 105), (7, 2, 110)])
    assert runs == [(0, 5, 100), (6, 1, 105), (7, 2, 110)]
