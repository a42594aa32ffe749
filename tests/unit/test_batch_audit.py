"""The audit's whole-batch verification (`core.batch_audit`, `heartbeat.audit_fold`) on
batches aiokafka's `DefaultRecordBatchBuilder` makes, copied to the "target" by the batch
path's own `core.batches.rewrite` (a new base offset and producer fields, CRC recomputed)
or rebuilt in other batches as the record path does.

Both sides are folded by `SideFolder` as the audit readers fold fetch answers, and each
window is judged with `record_audit.judge`. Nothing here talks to a broker: the fetch
answers are these bytes, and the table's tokens are a dict (the readers' table lookups
are plain reads of it).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder

from mirrorline.core import record_audit as audit
from mirrorline.core.batch_audit import MIN_WHOLE_RECORDS, Pairing, batch_key, other_side
from mirrorline.core.batches import HEADER_SIZE, crc32c, rewrite, split
from mirrorline.core.record_audit import Verdict
from mirrorline.heartbeat import audit_fold
from mirrorline.heartbeat.audit_fold import Cycle, SideFolder

WINDOW = 60_000
BASE_TS = 10**12 // WINDOW * WINDOW
PART = "orders|0"
Records = list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]]


def records(n: int, start: int = 0) -> Records:
    return [(f"k{i}".encode(), f"value {i}".encode() * 3, [("h", b"1")] if i % 4 else [])
            for i in range(start, start + n)]


def build(recs: Records, first_ts: int, codec: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec,
                                        is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for i, (key, value, headers) in enumerate(recs):
        builder.append(i, timestamp=first_ts + i, key=key, value=value, headers=headers)
    return bytes(builder.build())


def at_offset(data: bytes, offset: int) -> bytes:
    """`data` as a broker stores it at `offset` (the base offset it assigns)."""
    return data[:0] + struct.pack(">q", offset) + data[8:]


def source_log(sizes: list[int], codec: int = 0) -> list[bytes]:
    out, offset = [], 0
    for n in sizes:
        out.append(at_offset(build(records(n, offset), BASE_TS + offset, codec), offset))
        offset += n
    return out


def copied(batches: list[bytes], start: int = 0) -> list[bytes]:
    """The batch path's copies, stored on the target from offset `start`."""
    out, offset = [], start
    for data in batches:
        (batch,) = split(data).batches
        assert batch.header is not None
        out.append(at_offset(bytes(rewrite(batch, producer_id=7, producer_epoch=1,
                                           base_sequence=offset)), offset))
        offset += batch.header.record_count
    return out


class Table:
    """The table's per-side tokens, as `AuditApp.tokens` gives them."""

    def __init__(self) -> None:
        self.tokens: dict[str, dict[str, dict[str, int]]] = {"source": {}, "target": {}}

    def add(self, side: str, cycle: Cycle) -> None:
        mine = self.tokens[side]
        for start, keys in cycle.tokens.items():
            for key, n in keys.items():
                mine.setdefault(start, {})[key] = mine.setdefault(start, {}).get(key, 0) + n


def folder(side: str, pairing: Pairing, table: Table, hold_ms: int = 10_000) -> SideFolder:
    other = other_side(side)
    return SideFolder(side, pairing, window_ms=WINDOW, first=0, hold_ms=hold_ms,
                      other_tokens=lambda part: table.tokens[other],
                      own_tokens=lambda part: table.tokens[side])


def read(side: SideFolder, log: list[bytes], now: int, cycle: Cycle,
         expected: int = 0) -> int:
    side.read(PART, b"".join(log), 0, where="t-0", aborted=None, now_ms=now, cycle=cycle)
    return side.drain(PART, expected, now, cycle, where="t-0")


def judged(source: Cycle, target: Cycle) -> dict[str, audit.WindowVerdict]:
    starts = set(source.deltas) | set(target.deltas)
    return {s: audit.judge(tuple(source.deltas.get(s, [0, 0])),  # type: ignore[arg-type]
                           tuple(target.deltas.get(s, [0, 0])))  # type: ignore[arg-type]
            for s in starts}


def mirror(source_batches: list[bytes], target_batches: list[bytes], *,
           target_first: bool = False) -> tuple[SideFolder, SideFolder, Cycle, Cycle]:
    """Both sides read (source first, as the mirror runs behind it, unless `target_first`)
    and folded; held batches without a pair are decoded once their hold ends."""
    pairing, table = Pairing(), Table()
    src, tgt = folder("source", pairing, table), folder("target", pairing, table)
    cycles = {"source": Cycle(), "target": Cycle()}
    sides = [(src, source_batches), (tgt, target_batches)]
    for side, log in sides[::-1] if target_first else sides:
        side.read(PART, b"".join(log), 0, where="x-0", aborted=None, now_ms=0,
                  cycle=cycles[side.side])
    for now in (1, 20_000):  # pairs folded at once; the rest after the hold
        for side, _ in sides:
            side.drain(PART, 0, now, cycles[side.side], where="x-0")
    assert not src.queues[PART] and not tgt.queues[PART] and pairing.held_bytes == 0
    return src, tgt, cycles["source"], cycles["target"]


@pytest.fixture
def no_decoding(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("a record was decoded")

    monkeypatch.setattr(audit_fold, "decode", refuse)
    yield


@pytest.mark.parametrize("codec", [0, 1, 3, 4])
def test_copied_batches_are_verified_whole_without_decoding(no_decoding: None,
                                                           codec: int) -> None:
    """The batch path's copies (any codec) pair with their source batches: every record
    is verified, OK, and not one is decoded (decoding fails this test)."""
    source = source_log([20, 30, 10], codec)
    src, tgt, s, t = mirror(source, copied(source, start=500))
    assert {v.verdict for v in judged(s, t).values()} == {Verdict.OK}
    assert src.whole_batches == tgt.whole_batches == 3
    assert src.records == tgt.records == 60
    assert s.deltas == t.deltas and s.tokens == t.tokens


@pytest.mark.parametrize("target_first", [False, True])
def test_a_copy_read_before_its_source_batch_still_pairs(no_decoding: None,
                                                         target_first: bool) -> None:
    """The two readers report on one wall-clock grid, so the target's answer may be read
    before the source's: the copies still pair, whichever side comes first."""
    source = source_log([20, 30])
    src, tgt, s, t = mirror(source, copied(source), target_first=target_first)
    assert src.whole_batches == tgt.whole_batches == 2
    assert {v.verdict for v in judged(s, t).values()} == {Verdict.OK}


def test_one_altered_byte_in_a_copied_value_is_caught() -> None:
    source = source_log([20, 30, 10])
    target = copied(source)
    tampered = bytearray(target[1])
    at = tampered.index(b"value 25")
    tampered[at + 6] ^= 0x01  # "value 35"'s neighbour: one bit of one value
    struct.pack_into(">I", tampered, 17, crc32c(memoryview(tampered)[21:]))
    target[1] = bytes(tampered)
    for target_first in (False, True):
        src, tgt, s, t = mirror(source, target, target_first=target_first)
        assert [v.verdict for v in judged(s, t).values()] == [Verdict.CORRUPTED]
        assert src.whole_batches == tgt.whole_batches == 2  # the other two still paired


def test_a_batch_written_twice_or_missing_is_caught() -> None:
    source = source_log([20, 30, 10])
    target = copied(source)
    twice = copied(source[:2] + source[1:])
    for target_first in (False, True):
        _, _, s, t = mirror(source, twice, target_first=target_first)
        (verdict,) = judged(s, t).values()
        assert (verdict.verdict, verdict.count) == (Verdict.DUPLICATED, 30)
        _, _, s, t = mirror(source, [target[0], target[2]], target_first=target_first)
        (verdict,) = judged(s, t).values()
        assert (verdict.verdict, verdict.count) == (Verdict.MISSING, 30)


def test_records_reordered_inside_a_copied_batch_do_not_pair() -> None:
    """Two records swapped in a copy leave no pair: both sides decode that batch."""
    source = source_log([20])
    recs = records(20)
    recs[3], recs[4] = recs[4], recs[3]
    target = [at_offset(build(recs, BASE_TS), 0)]
    src, tgt, _, _ = mirror(source, target)
    assert src.whole_batches == tgt.whole_batches == 0


def test_other_batching_of_the_same_records_falls_back_and_passes() -> None:
    """The record path's batches (other sizes, small ones) pair with nothing: both sides
    decode them, and the same records give OK."""
    source = source_log([20, 30, 10])
    target, offset = [], 0
    for n in (25, 25, 4, 6):
        target.append(at_offset(build(records(n, offset), BASE_TS + offset), offset))
        offset += n
    src, tgt, s, t = mirror(source, target)
    assert {v.verdict for v in judged(s, t).values()} == {Verdict.OK}
    assert src.whole_batches == tgt.whole_batches == 0
    assert src.records == tgt.records == 60


def test_a_pair_half_folded_before_a_restart_still_pairs(no_decoding: None) -> None:
    """The target folded its copies as paired, then the service restarted before the
    source's fold reached the table: the source re-reads its batches and pairs them with
    the target's tokens in the table, not by decoding."""
    source = source_log([20, 30])
    pairing, table = Pairing(), Table()
    src, tgt = folder("source", pairing, table), folder("target", pairing, table)
    src.read(PART, b"".join(source), 0, where="s-0", aborted=None, now_ms=0, cycle=Cycle())
    t_cycle = Cycle()
    read(tgt, copied(source), 1, t_cycle)
    table.add("target", t_cycle)
    src.forget()  # the restart: what the source held is gone
    again = folder("source", Pairing(), table)
    s_cycle = Cycle()
    read(again, source, 5, s_cycle)
    assert again.whole_batches == 2 and s_cycle.deltas == t_cycle.deltas


def test_a_held_batch_pairs_with_a_token_that_reached_the_table_during_its_hold(
        no_decoding: None) -> None:
    """The target re-read its copies (a restart of its reader) while the source's fold of
    their pairs was on its way to the table: finding no partner, the copies are held, and
    when their hold ends they pair with the source's tokens now in the table."""
    source = source_log([20, 30])
    pairing, table = Pairing(), Table()
    src, tgt = folder("source", pairing, table), folder("target", pairing, table)
    s_cycle = Cycle()
    src.read(PART, b"".join(source), 0, where="s-0", aborted=None, now_ms=0, cycle=s_cycle)
    read(tgt, copied(source), 1, Cycle())   # paired; the target's fold is then lost
    tgt.forget()
    src.drain(PART, 0, 2, s_cycle, where="s-0")
    again = folder("target", Pairing(), table)
    t_cycle = Cycle()
    read(again, copied(source), 3, t_cycle)  # nothing to pair with: held
    assert again.whole_batches == 0 and again.queues[PART]
    table.add("source", s_cycle)             # the source's fold reaches the table
    again.drain(PART, 0, 20_000, t_cycle, where="t-0")
    assert again.whole_batches == 2 and t_cycle.deltas == s_cycle.deltas


def test_small_batches_and_split_windows_are_not_whole() -> None:
    (small,) = split(source_log([MIN_WHOLE_RECORDS - 1])[0]).batches
    assert batch_key(small, 0, WINDOW, 0) is None
    (ok,) = split(source_log([MIN_WHOLE_RECORDS])[0]).batches
    assert batch_key(ok, 0, WINDOW, 0) is not None
    assert batch_key(ok, 1, WINDOW, 0) is None  # partly before the fetch position
    straddling = build(records(10), BASE_TS + WINDOW - 5)
    (batch,) = split(straddling).batches
    assert batch_key(batch, 0, WINDOW, 0) is None
    assert len(ok.data) > HEADER_SIZE


def test_a_legacy_message_set_is_decoded_and_counted() -> None:
    """Magic 1 message sets (no batch header to pair by) are read record by record: the
    same records as magic 2 batches on the other side still give OK."""
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    for i, (key, value, _) in enumerate(records(10)):
        builder.append(i, timestamp=BASE_TS + i, key=key, value=value)
    legacy = bytes(builder.build())
    plain = [at_offset(build([(k, v, []) for k, v, _ in records(10)], BASE_TS), 0)]
    src, tgt, s, t = mirror([legacy], plain)
    assert {v.verdict for v in judged(s, t).values()} == {Verdict.OK}
    assert src.records == tgt.records == 10 and src.whole_batches == 0
