"""The pure parts of the throughput bench's cost figures and batch check.

What the bench prints as CPU seconds per million records, the machine's share of each
timed window and "N/M batches verbatim" comes from these: the /proc parsing and the
process-tree arithmetic (`bench/cpu.py`), the comparison of target batches with the source's
(`bench/batchcheck.py`, on batches built by aiokafka's client code), which scenarios a run
measures, and the words that say what limited a figure. No brokers, no /proc: these are
functions of their arguments.
"""

from __future__ import annotations

import argparse

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from bench.__main__ import Scenario, limit, parse_args, scenarios_for
from bench.batchcheck import compare
from bench.common import Usage
from bench.cpu import (
    TICK,
    Group,
    ProcStat,
    Sample,
    parse_machine,
    parse_stat,
    tree_ticks,
    used,
)
from mirrorline.core.batches import rewrite, split

LZ4 = 3


def _stat(pid: int, comm: str, ppid: int, utime: int, stime: int, cutime: int = 0,
          cstime: int = 0) -> str:
    middle = " ".join(["0"] * 9)  # pgrp .. cmajflt
    return (f"{pid} ({comm}) S {ppid} {middle} {utime} {stime} {cutime} {cstime} "
            "20 0 1 0 100 1000 10")


def test_stat_fields_are_read_after_the_command_name_whatever_it_holds() -> None:
    line = _stat(42, "kcat) (x y", 7, utime=100, stime=20, cutime=5, cstime=1)
    assert parse_stat(line) == ProcStat(ppid=7, own=120, children=6)


def test_a_tree_counts_its_descendants_and_what_they_waited_for() -> None:
    table = {
        1: ProcStat(ppid=0, own=10, children=0),    # the bench
        2: ProcStat(ppid=1, own=100, children=30),  # spark-executor; a reaped child: 30
        3: ProcStat(ppid=2, own=400, children=0),   # its JVM
        4: ProcStat(ppid=3, own=50, children=0),    # a Python worker
        5: ProcStat(ppid=1, own=900, children=0),   # a broker, not the contender's
    }
    assert tree_ticks(table, [2]) == 100 + 30 + 400 + 50
    assert tree_ticks(table, [2], children=False) == 100
    assert tree_ticks(table, [2, 99]) == 580  # an ended root counts nothing
    # The bench alone: not the brokers and contenders it started.
    assert tree_ticks(table, [1], children=False) == 10


def test_machine_busy_leaves_out_idle_iowait_and_guest_time() -> None:
    text = ("cpu  100 5 50 1000 20 3 2 1 40 4\n"
            "cpu0 50 2 25 500 10 1 1 0 20 2\n")
    busy, total = parse_machine(text)
    assert (busy, total) == (100 + 5 + 50 + 3 + 2 + 1, 100 + 5 + 50 + 1000 + 20 + 3 + 2 + 1)


def test_a_pipe_that_ends_within_the_window_is_counted_once_and_only_its_window() -> None:
    """kcat's consumers end at the partition's end, before the last record lands: their
    time must not vanish from the contender's figure (it showed negative CPU) nor bring
    along what they used before the window."""
    group = Group((10, 11), reaped_here=True)
    start = Sample((group,), ({10: 30, 11: 40},), reaped=500, busy=0, total=0)
    # 10 ended at 130 ticks and was waited for: the bench's children gained 130; 11 lives.
    end = Sample((group,), ({11: 90},), reaped=630, busy=400, total=1000)
    got = used(start, end)
    assert round(got.groups[0] * TICK) == (130 - 30) + (90 - 40)
    assert (round(got.busy * TICK), round(got.total * TICK)) == (400, 1000)


def _batch(records: list[tuple[bytes, bytes]], codec: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for i, (key, value) in enumerate(records):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=key, value=value,
                       headers=[])
    return bytes(builder.build())


RECORDS = [(b"%010d" % i, b"value %d " % i * 20) for i in range(40)]


def test_batches_copied_with_a_new_header_are_verbatim_rebuilt_ones_are_not() -> None:
    source = split(_batch(RECORDS[:20], LZ4) + _batch(RECORDS[20:], LZ4)).batches
    # The batch path: the header rewritten for an idempotent producer, the bytes kept.
    copied = split(b"".join(bytes(rewrite(b, producer_id=7, producer_epoch=0,
                                          base_sequence=i * 20))
                            for i, b in enumerate(source))).batches
    check = compare(source, copied)
    assert (check.compared, check.verbatim, check.codec_kept) == (2, 2, True)
    assert check.all_verbatim and check.source_records == 40
    # A record path that re-batches (other boundaries) and compresses again.
    rebuilt = split(_batch(RECORDS[:30], LZ4) + _batch(RECORDS[30:], LZ4)).batches
    check = compare(source, rebuilt)
    assert (check.verbatim, check.codec_kept, check.all_verbatim) == (0, True, False)
    # One that writes them uncompressed: the codec is not kept.
    plain = split(_batch(RECORDS)).batches
    check = compare(source, plain)
    assert check.target_codecs == ("none",) and not check.codec_kept
    assert check.describe() == "codec lz4 -> none, 0/1 batches verbatim"


def _args(*argv: str) -> argparse.Namespace:
    return parse_args(list(argv))


def test_every_run_measures_compressed_topics_beside_the_uncompressed_ones() -> None:
    assert scenarios_for(_args()) == [
        Scenario(500_000, 100), Scenario(200_000, 1024),
        *(Scenario(200_000, 1024, codec) for codec in ("lz4", "zstd", "snappy", "gzip"))]
    assert scenarios_for(_args("--quick")) == [
        Scenario(50_000, 100), Scenario(50_000, 1024), Scenario(50_000, 1024, "lz4")]
    assert scenarios_for(_args("--codec", "zstd")) == [Scenario(200_000, 1024, "zstd")]
    assert scenarios_for(_args("--records", "1000", "--codec", "none", "--codec", "gzip")) == [
        Scenario(1000, 100), Scenario(1000, 100, "gzip")]
    assert _args("--only", "mirrorline").only == ["mirrorline_batch", "mirrorline_records"]


def _usage(contender: float | None, brokers: float, others: float, idle: float) -> Usage:
    harness = 0.05
    busy = (contender or 0) + brokers + harness + others
    return Usage(seconds=1.0, contender=contender, brokers=brokers, harness=harness,
                 busy=busy, capacity=busy + idle, peak_rss=None)


def test_the_limit_names_the_busiest_when_the_cores_are_full() -> None:
    assert limit(_usage(0.8, 1.0, 0.1, 0.05)) == "the 2 cores (busiest: the brokers)"
    assert limit(_usage(0.95, 0.4, 0.1, 0.5)) == "the contender's core"
    assert limit(_usage(0.3, 0.3, 0.1, 1.25)) == "neither CPU: waiting (round trips, acks)"
