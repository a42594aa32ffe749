"""The batch codec (`mirrorline.core.batches`) on record batches Kafka clients made.

Two makers, neither ours: Apache Kafka's own client code, through `tests/java/BatchFixtures.java`
(every codec, end-transaction markers, and `MemoryRecords.filterTo` -- the log cleaner's code --
for compaction gaps, emptied batches and the delete horizon), whose bytes and whose reader's
view of every batch and record are stored in `data/kafka_batches.json`; and aiokafka's
`DefaultRecordBatchBuilder`, for property tests. Rewritten batches are checked with aiokafka's
reader (`DefaultRecordBatch.validate_crc`, and its records where it has the codec: none and
gzip here; lz4, snappy and zstd have no Python library in the venv, so for those the records
section is checked byte for byte and the CRC, which covers it, is checked).
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import replace
from functools import cache
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from mirrorline.core.batches import (
    HEADER_SIZE,
    AbortedTransactions,
    Batch,
    BatchError,
    ControlType,
    Path,
    Reason,
    Route,
    control_type,
    crc32c,
    crc32c_shift,
    next_sequence,
    parse_header,
    record_offsets,
    records_crc,
    rewrite,
    rewrite_header,
    route,
    split,
)

FIXTURES = pathlib.Path(__file__).parent / "data" / "kafka_batches.json"
#: Codecs aiokafka decodes here: all of them (gzip from the standard library, lz4, snappy
#: and zstd through cramjam, a dependency).
READABLE = {0, 1, 2, 3, 4}


@cache
def cases() -> dict[str, dict[str, Any]]:
    data = json.loads(FIXTURES.read_text())
    return {case["name"]: case for case in data["cases"]}


def batches_of(name: str) -> list[tuple[Batch, dict[str, Any]]]:
    case = cases()[name]
    cut = split(bytes.fromhex(case["bytes"]))
    assert cut.incomplete == 0
    assert len(cut.batches) == len(case["batches"])
    return list(zip(cut.batches, case["batches"], strict=True))


def every_batch() -> list[tuple[str, int]]:
    return [(name, i) for name, case in cases().items() for i in range(len(case["batches"]))]


def one(name: str, index: int = 0) -> tuple[Batch, dict[str, Any]]:
    return batches_of(name)[index]


def unhex(text: str | None) -> bytes | None:
    return None if text is None else bytes.fromhex(text)


def kafka_records(expected: dict[str, Any], base: int) -> list[tuple[Any, ...]]:
    """Kafka's reading of a batch's records, placed at a new base offset."""
    return [(r["offset"] - expected["base_offset"] + base, r["timestamp"], unhex(r["key"]),
             unhex(r["value"]), [(k, unhex(v)) for k, v in r["headers"]])
            for r in expected["records"]]


def aiokafka_records(data: bytes) -> list[tuple[Any, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers))
            for r in DefaultRecordBatch(data)]


@pytest.mark.parametrize(("name", "index"), every_batch())
def test_the_header_reads_as_kafka_reads_it(name: str, index: int) -> None:
    batch, expected = one(name, index)
    header = batch.header
    assert header is not None
    assert batch.base_offset == header.base_offset == expected["base_offset"]
    assert len(batch.data) == header.size == expected["size"]
    for field in ("partition_leader_epoch", "magic", "crc", "compression", "log_append_time",
                  "is_transactional", "is_control", "has_delete_horizon", "last_offset",
                  "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
                  "base_sequence", "record_count"):
        assert getattr(header, field) == expected[field], field
    assert crc32c(batch.data[21:]) == header.crc
    assert header.next_offset == expected["last_offset"] + 1


@pytest.mark.parametrize(("name", "index"), every_batch())
def test_record_offsets_come_from_the_header_or_the_deltas(name: str, index: int) -> None:
    """Uncompressed: every record's own offset, gaps included. Compressed: the header's range
    when contiguous; when compaction left gaps only decompressing tells (None)."""
    batch, expected = one(name, index)
    assert batch.header is not None
    offsets = [r["offset"] for r in expected["records"]]
    found = record_offsets(batch)
    if batch.header.compression and not batch.header.contiguous:
        assert found is None
    else:
        assert found == offsets
    assert batch.header.contiguous == (offsets == list(range(expected["base_offset"],
                                                            expected["last_offset"] + 1)))


def test_compaction_gaps_are_seen_in_the_header_of_every_codec() -> None:
    for codec in ("none", "gzip", "lz4"):
        batch, expected = one(f"compacted-gaps-{codec}")
        assert batch.header is not None
        assert not batch.header.contiguous
        # The cleaner keeps the last offset (109) although record 109 is gone.
        assert batch.header.next_offset == 110
        assert expected["records"][-1]["offset"] == 108


@pytest.mark.parametrize(("name", "index"), every_batch())
def test_rewrite_changes_the_header_only_and_kafkas_crc_holds(name: str, index: int) -> None:
    batch, expected = one(name, index)
    header = batch.header
    assert header is not None
    if header.is_control:
        with pytest.raises(BatchError, match=f"offset {header.base_offset} is a control batch"):
            rewrite(batch)
        return
    if not header.contiguous:
        with pytest.raises(BatchError, match=f"offset {header.base_offset} holds "
                           f"{header.record_count} records over .* a broker refuses it"):
            rewrite(batch)
        return
    stamps: list[dict[str, Any]] = [
        {},
        {"producer_id": 4242, "producer_epoch": 3, "base_sequence": 2**31 - 2},
        {"producer_id": 77, "producer_epoch": 0, "base_sequence": 0, "transactional": True},
    ]
    for stamp in stamps:
        out = bytes(rewrite(batch, **stamp))
        assert out[HEADER_SIZE:] == bytes(batch.data[HEADER_SIZE:])
        reread = DefaultRecordBatch(out)
        assert reread.validate_crc()
        new = parse_header(out)
        assert (new.base_offset, new.partition_leader_epoch) == (0, -1)
        assert (new.producer_id, new.producer_epoch, new.base_sequence) == (
            stamp.get("producer_id", -1), stamp.get("producer_epoch", -1),
            stamp.get("base_sequence", -1))
        assert new.is_transactional == stamp.get("transactional", False)
        assert new.attributes & ~0x10 == header.attributes & ~0x10
        for same in ("batch_length", "magic", "last_offset_delta", "base_timestamp",
                     "max_timestamp", "record_count"):
            assert getattr(new, same) == getattr(header, same), same
        if header.compression in READABLE and not header.log_append_time:
            assert aiokafka_records(out) == kafka_records(expected, 0)


@pytest.mark.parametrize("codec", ["snappy", "lz4", "zstd"])
def test_compressed_batches_are_rewritten_without_decompressing(codec: str) -> None:
    """The path never decompresses: a batch is copied whatever its codec."""
    batch, _ = one(f"idempotent-{codec}")
    assert batch.header is not None and batch.header.codec == codec
    out = rewrite(batch, producer_id=5, producer_epoch=1, base_sequence=9)
    assert DefaultRecordBatch(bytes(out)).validate_crc()
    assert route(batch, target_max_message_bytes=1 << 20) == Route(Path.BATCH, Reason.COPY)


def test_a_fetch_cut_anywhere_gives_its_whole_batches_and_reports_the_rest() -> None:
    whole = bytes.fromhex(cases()["transactions"]["bytes"])
    sizes = [b["size"] for b in cases()["transactions"]["batches"]]
    starts = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
    for length in range(len(whole) + 1):
        cut = split(whole[:length])
        complete = max(i for i, start in enumerate(starts) if start <= length)
        assert len(cut.batches) == complete
        assert cut.incomplete == length - starts[complete]
        if cut.incomplete >= 8:
            assert cut.incomplete_offset == cases()["transactions"]["batches"][complete][
                "base_offset"]
        assert cut.next_offset == (cut.batches[-1].header.next_offset
                                   if cut.batches and cut.batches[-1].header else None)


def test_control_markers_and_aborted_transactions_under_read_committed() -> None:
    """Producer 9 aborts (offsets 0-2) then commits (4-5); producer 11 aborts (7-8) around a
    plain producer's batch (9). The fetch response names (9, 0) and (11, 7) as aborted."""
    batches = [batch for batch, _ in batches_of("transactions")]
    controls = [control_type(b) for b in batches if b.header and b.header.is_control]
    assert controls == [ControlType.ABORT, ControlType.COMMIT, ControlType.ABORT]
    tracker = AbortedTransactions([(11, 7), (9, 0)])
    routes = []
    for batch in batches:
        aborted = tracker.is_aborted(batch)
        routes.append(route(batch, aborted=aborted, target_max_message_bytes=1 << 20))
    assert [(r.path, r.reason) for r in routes] == [
        (Path.SKIP, Reason.ABORTED), (Path.SKIP, Reason.CONTROL),
        (Path.BATCH, Reason.COPY), (Path.SKIP, Reason.CONTROL),
        (Path.SKIP, Reason.ABORTED), (Path.BATCH, Reason.COPY),
        (Path.SKIP, Reason.CONTROL)]


def test_without_aborted_transactions_every_data_batch_is_copied() -> None:
    """read_uncommitted: the response lists no aborted transactions."""
    tracker = AbortedTransactions([])
    assert not any(tracker.is_aborted(batch) for batch, _ in batches_of("transactions"))


def test_routes_say_why_a_batch_leaves_the_batch_path() -> None:
    limit = 1 << 20
    gaps, _ = one("compacted-gaps-lz4")
    assert route(gaps, target_max_message_bytes=limit) == Route(Path.RECORDS, Reason.GAPS)
    emptied, _ = one("compacted-emptied")
    assert route(emptied, target_max_message_bytes=limit) == Route(Path.SKIP, Reason.EMPTY)
    horizon, _ = one("compacted-delete-horizon")
    assert route(horizon, target_max_message_bytes=limit).reason is Reason.DELETE_HORIZON
    appended, _ = one("log-append-time")
    assert route(appended, target_max_message_bytes=limit).reason is Reason.SOURCE_APPEND_TIME

    batch, expected = one("idempotent-zstd")
    assert route(batch, target_max_message_bytes=expected["size"]).path is Path.BATCH
    assert route(batch, target_max_message_bytes=expected["size"] - 1) == Route(
        Path.RECORDS, Reason.TOO_LARGE)
    assert route(batch, target_max_message_bytes=limit, target_log_append_time=True) == Route(
        Path.RECORDS, Reason.TARGET_APPEND_TIME)
    assert route(batch, target_max_message_bytes=limit, policy_changes_records=True) == Route(
        Path.RECORDS, Reason.POLICY)
    assert route(batch, aborted=True, target_max_message_bytes=limit) == Route(
        Path.SKIP, Reason.ABORTED)


def test_a_legacy_message_set_splits_and_goes_the_record_path() -> None:
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 16)
    builder.append(0, timestamp=1, key=b"k", value=b"v")
    legacy = bytes(builder.build())
    modern, _ = one("plain-none")
    cut = split(legacy + bytes(modern.data))
    assert [(b.magic, b.header is None) for b in cut.batches] == [(1, True), (2, False)]
    assert route(cut.batches[0], target_max_message_bytes=1 << 20) == Route(
        Path.RECORDS, Reason.LEGACY)
    with pytest.raises(BatchError, match="magic 1"):
        rewrite(cut.batches[0])


def test_bad_input_is_named() -> None:
    batch, _ = one("plain-none")
    with pytest.raises(BatchError, match="transactional batch needs a producer id"):
        rewrite(batch, transactional=True)
    with pytest.raises(BatchError, match="producer id 3 needs an epoch and a base sequence"):
        rewrite(batch, producer_id=3)
    with pytest.raises(BatchError, match="needs 61"):
        parse_header(bytes(batch.data[:40]))
    broken = bytearray(batch.data)
    broken[HEADER_SIZE:HEADER_SIZE + 2] = b"\xfe\x7f"  # record 0 says 8191 bytes long
    with pytest.raises(BatchError, match="record 0 of the batch at offset 0"):
        record_offsets(split(bytes(broken)).batches[0])
    damaged = bytearray(batch.data)
    damaged[-1] ^= 0x01  # one bit of the batch's last byte
    with pytest.raises(BatchError, match=r"offset 0: its CRC 0x[0-9a-f]{8} does not match"):
        rewrite(split(bytes(damaged)).batches[0])
    assert DefaultRecordBatch(bytes(rewrite(split(bytes(damaged)).batches[0],
                                            verify=False))).validate_crc()
    gz, _ = one("plain-gzip")
    assert gz.header is not None
    flagged = replace(gz.header, attributes=gz.header.attributes | 0x20)  # "control"
    with pytest.raises(BatchError, match="offset 0 is gzip-compressed"):
        control_type(Batch(gz.data, gz.base_offset, 2, flagged))


def test_sequences_wrap_as_kafkas() -> None:
    assert next_sequence(0, 5) == 5
    assert next_sequence(2**31 - 3, 3) == 0
    assert next_sequence(2**31 - 2, 3) == 1


_records = st.lists(
    st.tuples(st.integers(0, 3),  # offset gap before the record
              st.integers(-10**6, 10**6),  # timestamp relative to the first
              st.none() | st.binary(max_size=40),
              st.none() | st.binary(max_size=300),
              st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)),
                       max_size=3)),
    min_size=1, max_size=12)


@settings(max_examples=100, deadline=None)
@given(batches=st.lists(st.tuples(st.sampled_from(sorted(READABLE)), _records, st.booleans(),
                                  st.booleans()),
                        min_size=1, max_size=4),
       producer=st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1),
                          st.integers(0, 2**31 - 1)),
       cut=st.integers(0, 200))
def test_aiokafka_batches_split_read_and_rewrite(
        batches: list[tuple[int, list[tuple[Any, ...]], bool, bool]],
        producer: tuple[int, int, int], cut: int) -> None:
    """Batches aiokafka builds -- gaps, negative timestamp deltas, null keys and values,
    headers -- split from one fetch, cut short anywhere in the last one, keep their records
    and offsets through a rewrite, and their CRC."""
    fetched = b""
    made = []
    for codec, records, transactional, gapped in batches:
        builder = DefaultRecordBatchBuilder(
            magic=2, compression_type=codec, is_transactional=transactional,
            producer_id=11 if transactional else -1, producer_epoch=0 if transactional else -1,
            base_sequence=0 if transactional else -1, batch_size=1 << 20)
        offset = -1
        for gap, ts, key, value, headers in records:
            offset += 1 + (gap if gapped else 0)
            builder.append(offset, timestamp=10**12 + ts, key=key, value=value,
                           headers=headers)
        data = bytes(builder.build())
        made.append(data)
        fetched += data
    last = len(made[-1])
    shortened = fetched[:len(fetched) - (cut % last)] if cut % last else fetched
    got = split(shortened)
    whole = made if shortened == fetched else made[:-1]
    assert [bytes(b.data) for b in got.batches] == whole
    assert got.incomplete == len(shortened) - sum(len(data) for data in whole)
    pid, epoch, seq = producer
    for batch, data in zip(got.batches, whole, strict=True):
        expected = aiokafka_records(data)
        offsets = [r[0] for r in expected]
        assert batch.header is not None
        assert batch.header.contiguous == (offsets == list(range(len(expected))))
        if batch.header.compression and not batch.header.contiguous:
            assert record_offsets(batch) is None
        else:
            assert record_offsets(batch) == offsets
        if not batch.header.contiguous:
            with pytest.raises(BatchError, match="compaction gaps"):
                rewrite(batch)
            continue
        out = bytes(rewrite(batch, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                            transactional=not batch.header.is_transactional))
        assert DefaultRecordBatch(out).validate_crc()
        assert aiokafka_records(out) == expected
        assert out[HEADER_SIZE:] == data[HEADER_SIZE:]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=5000), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
def test_a_crc_difference_carries_through_any_bytes_as_the_shift_says(
        data: bytes, a: int, b: int) -> None:
    """The rewritten header's CRC and the audit's records CRC are derived, not recomputed
    over the records: this is the identity both rely on."""
    assert crc32c(data, a) ^ crc32c(data, b) == crc32c_shift(a ^ b, len(data))


@pytest.mark.parametrize(("name", "index"), every_batch())
def test_the_records_crc_and_the_new_crc_follow_from_the_checked_one(name: str,
                                                                   index: int) -> None:
    batch, _ = one(name, index)
    assert records_crc(batch) == crc32c(batch.data[HEADER_SIZE:])
    if batch.header is None or batch.header.is_control or not batch.header.contiguous:
        return
    header, records = rewrite_header(batch, producer_id=7, producer_epoch=2,
                                     base_sequence=11, transactional=True)
    recomputed = rewrite_header(batch, producer_id=7, producer_epoch=2, base_sequence=11,
                                transactional=True, verify=False)[0]
    assert header == recomputed and bytes(records) == bytes(batch.data[HEADER_SIZE:])
    assert DefaultRecordBatch(bytes(header + records)).validate_crc()
