"""A fetch answer cut into what a pump queues: source batches, decoded records, and where
fetching continues (pure: Kafka's own batches from `data/kafka_batches.json`)."""

from __future__ import annotations

import json
import pathlib

from aiokafka import TopicPartition

from mirrorline.core.batches import rewrite, split
from mirrorline.core.copy_path import PathChooser
from mirrorline.kafka.rawbatches import FetchedPartition
from mirrorline.replicator.batchfetch import cut
from mirrorline.replicator.shipment import SourceBatch

FIXTURES = pathlib.Path(__file__).parent / "data" / "kafka_batches.json"
TP = TopicPartition("orders", 0)


def case_bytes(name: str) -> bytes:
    case = next(c for c in json.loads(FIXTURES.read_text())["cases"] if c["name"] == name)
    return bytes.fromhex(case["bytes"])


def answer(records: bytes, aborted: tuple[tuple[int, int], ...] = ()) -> FetchedPartition:
    return FetchedPartition(records, high_watermark=100, last_stable_offset=100,
                            log_start_offset=0, aborted_transactions=aborted)


def kinds(chunks: list[object]) -> list[object]:
    return [("batch", c.header.base_offset) if isinstance(c, SourceBatch)
            else ("records", [r.offset for r in c])  # type: ignore[attr-defined]
            for c in chunks]


def test_read_committed_leaves_out_markers_and_aborted_transactions() -> None:
    """Producer 9 aborts (0-2) then commits (4-5); producer 11 aborts (7-8) around a plain
    batch (9); markers at 3, 6 and 10. Only the committed and plain batches are queued,
    and fetching continues after the last marker."""
    part = cut(answer(case_bytes("transactions"), ((9, 0), (11, 7))), TP, 0,
               PathChooser("on"), read_committed=True, max_request_size=1 << 20)
    assert kinds(part.chunks) == [("batch", 4), ("batch", 9)]
    assert part.next_offset == 11 and part.copy_path == "batches"


def test_read_uncommitted_copies_every_data_batch_and_no_marker() -> None:
    part = cut(answer(case_bytes("transactions")), TP, 0, PathChooser("on"),
               read_committed=False, max_request_size=1 << 20)
    assert kinds(part.chunks) == [("batch", 0), ("batch", 4), ("batch", 7), ("batch", 9)]
    assert part.next_offset == 11


def test_gapped_batches_are_decoded_with_their_offsets_and_say_why() -> None:
    part = cut(answer(case_bytes("compacted-gaps-lz4")), TP, 0, PathChooser("on"),
               read_committed=False, max_request_size=1 << 20)
    (records,) = part.chunks
    assert isinstance(records, list) and len(records) >= 1
    offsets = [r.offset for r in records]
    assert offsets == sorted(offsets) and offsets[-1] - offsets[0] + 1 > len(offsets)
    assert part.copy_path == "records" and "offset gaps" in part.reason


def test_a_fetch_from_inside_a_batch_keeps_only_the_records_from_there() -> None:
    whole = split(case_bytes("plain-zstd")).batches[0]  # offsets 0..2, zstd
    part = cut(answer(bytes(whole.data)), TP, 1, PathChooser("on"), read_committed=False,
               max_request_size=1 << 20)
    assert kinds(part.chunks) == [("records", [1, 2])]
    assert part.next_offset == 3 and part.reason == "resuming inside a source batch"


def test_under_auto_tiny_batches_are_decoded_together_for_rebatching() -> None:
    one = split(case_bytes("plain-none")).batches[0]  # 3 records, 140 bytes
    placed = [bytes(rewrite(one, base_offset=base)) for base in (0, 3, 6)]
    part = cut(answer(b"".join(placed)), TP, 0, PathChooser("auto"), read_committed=False,
               max_request_size=1 << 20)
    assert kinds(part.chunks) == [("records", list(range(9)))]
    assert part.copy_path == "records" and "re-batched" in part.reason
    on = cut(answer(b"".join(placed)), TP, 0, PathChooser("on"), read_committed=False,
             max_request_size=1 << 20)
    assert kinds(on.chunks) == [("batch", 0), ("batch", 3), ("batch", 6)]


def test_a_batch_larger_than_a_request_is_decoded() -> None:
    batch = split(case_bytes("idempotent-zstd")).batches[0]
    part = cut(answer(bytes(batch.data)), TP, 1000, PathChooser("on"), read_committed=False,
               max_request_size=len(batch.data) - 1)
    assert kinds(part.chunks) == [("records", list(range(1000, 1006)))]
    assert "max.request.size" in part.reason
