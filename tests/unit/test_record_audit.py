"""The audit's per-batch work: `core.record_audit.fold_records` over records decoded from raw
fetches by `kafka.rawrecords.decode`.

Batches are made by Kafka clients, not by us: aiokafka's `DefaultRecordBatchBuilder` (the
framing a replicator's producer gives the target), and Apache Kafka's own client code through
`data/kafka_batches.json` (transaction markers; see test_batches.py). No broker: decoding a
fetch answer's bytes needs none, and what a broker returns is these bytes as written.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from mirrorline.core import record_audit as audit
from mirrorline.core.batches import split
from mirrorline.kafka.rawrecords import decode

W = 1000

#: key, value, headers, timestamp
Rec = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]

RECORDS: list[Rec] = [
    (b"k0", b"v0" * 40, [], 10_000),
    (None, b"v1", [], 10_001),
    (b"k2", None, [("trace", b"abc"), ("trace", None)], 10_002),
    (b"", b"", [], 9_990),  # earlier than the batch's first record: a negative delta
    (b"k4", b"v4", [("h", b"")], 10_950),
    (b"k5", b"v5" * 600, [], 10_999),
]


def batch(records: list[Rec], *, base_offset: int = 0, codec: int = 0,
          producer_id: int = -1) -> bytes:
    """One batch as aiokafka's producer frames it: offset deltas from 0, timestamp deltas
    from the first record's timestamp."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=producer_id, producer_epoch=-1,
                                        base_sequence=-1, batch_size=1 << 24)
    for delta, (key, value, headers, timestamp) in enumerate(records):
        assert builder.append(delta, timestamp, key, value, headers) is not None
    out = bytearray(builder.build())
    out[:8] = base_offset.to_bytes(8, "big")  # the broker's offset; outside the CRC
    return bytes(out)


def reference(records: list[Rec], since: int = -1) -> dict[str, list[int]]:
    """The sums record by record, as the audit computed them before batches."""
    deltas: dict[str, list[int]] = {}
    for key, value, headers, timestamp in records:
        if timestamp >= since:
            audit.accumulate(deltas, timestamp, audit.record_digest(key, value, headers,
                                                                   timestamp), W)
    return deltas


def folded(*fetches: tuple[bytes, int]) -> dict[str, list[int]]:
    """Sums of raw fetch answers (bytes, fetch position) as the audit reader folds them."""
    deltas: dict[str, list[int]] = {}
    for data, position in fetches:
        for records in decode(data, position, where="t-0").batches:
            audit.fold_records(deltas, records, W)
    return deltas


def judged(source: dict[str, list[int]], target: dict[str, list[int]]) -> audit.Verdict:
    (s_count, s_sum), (t_count, t_sum) = source["10000"], target["10000"]
    return audit.judge((s_count, s_sum), (t_count, t_sum)).verdict


def test_a_batch_folds_to_the_sums_of_its_records_one_by_one() -> None:
    """Across windows, with headers, null and empty keys and values, and a window start."""
    decoded = decode(batch(RECORDS), 0, where="t-0").batches
    assert len(decoded) == 1
    for since in (-1, 10_000, 10_500):
        deltas: dict[str, list[int]] = {}
        count, top = audit.fold_records(deltas, decoded[0], W, since)
        assert deltas == reference(RECORDS, since)
        kept = [r[3] for r in RECORDS if r[3] >= since]
        assert (count, top) == (len(kept), max(kept))
    same_window: dict[str, list[int]] = {"10000": [1, 7]}
    audit.fold_records(same_window, decode(batch(RECORDS[:3]), 0, where="t-0").batches[0], W)
    assert same_window == {"10000": [4, (7 + reference(RECORDS[:3])["10000"][1]) & audit.MASK]}


def test_the_same_records_framed_otherwise_on_the_target_fold_alike() -> None:
    """The target holds the source's records in other batches: other base offsets and
    timestamps, so other offset and timestamp deltas, split differently, compressed. The
    digest is of what a reader sees (key, value, headers, timestamp), so the sums agree."""
    source = folded((batch(RECORDS, base_offset=500), 500))
    target = folded((batch(RECORDS[:2], base_offset=7) + batch(RECORDS[2:], base_offset=9,
                                                               codec=1), 7))
    assert source == target == reference(RECORDS)


@pytest.mark.parametrize("change", [
    lambda r: (r[0] + b"!", r[1], r[2], r[3]),
    lambda r: (r[0], r[1][:-1] + b"?", r[2], r[3]),
    lambda r: (r[0], r[1], [("h", b"x")], r[3]),
    lambda r: (r[0], r[1], r[2], r[3] + 1),
    lambda r: (None, r[1], r[2], r[3]),
], ids=["key", "value", "header", "timestamp", "key-null"])
def test_an_altered_record_changes_its_window_sum_not_its_count(change: Any) -> None:
    altered = [change(RECORDS[0]), *RECORDS[1:]]
    source, target = folded((batch(RECORDS), 0)), folded((batch(altered), 0))
    assert source["10000"][0] == target["10000"][0]
    assert source["10000"][1] != target["10000"][1]
    assert judged(source, target) is audit.Verdict.CORRUPTED


def test_a_record_written_twice_or_dropped_changes_the_count() -> None:
    source = folded((batch(RECORDS), 0))
    twice = folded((batch(RECORDS), 0), (batch(RECORDS[:1], base_offset=6), 6))
    dropped = folded((batch(RECORDS[1:]), 0))
    assert twice["10000"][0] == source["10000"][0] + 1
    assert dropped["10000"][0] == source["10000"][0] - 1
    assert judged(source, twice) is audit.Verdict.DUPLICATED
    assert judged(source, dropped) is audit.Verdict.MISSING


def test_records_before_the_fetch_position_are_not_folded_again() -> None:
    """A fetch from the middle of a batch returns the whole batch (as a broker does): the
    records before the position were folded by the previous fetch."""
    data = batch(RECORDS, base_offset=100)
    decoded = decode(data, 103, where="t-0")
    assert [r.offset for r in decoded.batches[0]] == [103, 104, 105]
    assert decoded.next_offset == 106
    assert folded((data[:0], 100)) == {}
    assert folded((batch(RECORDS[:3], base_offset=100), 100), (data, 103)) \
        == reference(RECORDS)


def test_a_batch_cut_off_by_the_fetch_size_waits_for_the_next_fetch() -> None:
    whole = batch(RECORDS[:2], base_offset=0)
    data = whole + batch(RECORDS[2:], base_offset=2)
    decoded = decode(data[:-5], 0, where="t-0")
    assert len(decoded.batches) == 1 and decoded.next_offset == 2


def test_a_corrupted_batch_is_refused_naming_the_partition() -> None:
    data = bytearray(batch(RECORDS))
    data[-1] ^= 1
    with pytest.raises(CorruptRecordException, match="orders-3: the record batch at offset 0"):
        decode(bytes(data), 0, where="orders-3")


def _transactions() -> bytes:
    """Kafka's client's transactions, but for the committed batch (lz4, which aiokafka cannot
    decode in this venv): that one is aiokafka's, uncompressed, with the same producer."""
    fixtures = pathlib.Path(__file__).parent / "data" / "kafka_batches.json"
    case = next(c for c in json.loads(fixtures.read_text())["cases"]
                if c["name"] == "transactions")
    batches = [bytes(b.data) for b in split(bytes.fromhex(case["bytes"])).batches]
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True,
                                        producer_id=9, producer_epoch=1, base_sequence=3,
                                        batch_size=1 << 20)
    for delta in range(2):
        builder.append(delta, 1000 + delta, b"k", b"committed", [])
    committed = bytearray(builder.build())
    committed[:8] = (4).to_bytes(8, "big")
    batches[2] = bytes(committed)
    return b"".join(batches)


def test_markers_are_skipped_and_read_committed_leaves_aborted_transactions_out() -> None:
    """Kafka's client wrote: producer 9 aborted offsets 0-2 (marker 3) and committed 4-5
    (marker 6); producer 11 aborted 7-8 (marker 10) around a plain record at 9."""
    data = _transactions()
    uncommitted = decode(data, 0, where="t-0")
    assert [r.offset for b in uncommitted.batches for r in b] == [0, 1, 2, 4, 5, 7, 8, 9]
    committed = decode(data, 0, where="t-0", aborted=[(9, 0), (11, 7)])
    assert [r.offset for b in committed.batches for r in b] == [4, 5, 9]
    assert uncommitted.next_offset == committed.next_offset == 11
