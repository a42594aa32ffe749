"""End-to-end latency at a steady rate: the paced producer, the measuring consumer, the maths.

`python -m bench` runs, for each contender, a steady-rate run after the throughput
scenarios (`--rate`, `--duration`; `--quick` for a short one, `--latency-only` to skip the
throughput). The harness seeds a few warm-up records, starts the contender and waits until
they are on the target, so start-up is not counted as latency. Then two processes of
their own, the same for every contender:

* `python -m bench.latency produce`: a confluent-kafka producer sends `rate` records/s
  round-robin over the source partitions for `duration` seconds, paced against a schedule
  (record i is due i / rate seconds after the start). Each record's CreateTime is set
  explicitly to the wall-clock millisecond at which it is handed to the client, and the
  same 13 digits open its value. It reports the rate it achieved and how far it fell
  behind its schedule at worst, so a producer that could not hold the rate shows. After
  the measured records it sends a few trailer records per partition, not measured:
  a kcat pipe holds a partition's newest lines until more input follows (its producer
  reads its input in 128-byte `fread`s that wait to fill, behind stdio's buffer), and
  without trailers the last ones would never be copied.
* `python -m bench.latency measure`: a confluent-kafka consumer on the target, assigned
  to every partition from the beginning (the warm-up records' keys are not numbers, and
  it passes them by), takes the wall clock each time
  records come out of the client and subtracts the source timestamp read from the value.
  The value, not the target record's timestamp, because kcat's pipes do not carry
  timestamps (the table says which contenders kept CreateTime). Its own delay (fetch,
  hand-over to Python) is in every contender's figures alike.

Both processes share the machine's clock with nothing in between, so a latency is the
time from the producer's `produce()` call (CreateTime) to the measuring consumer seeing
the copy: the producer's own batching (`linger.ms` 5) and the source broker's
acknowledgement are in it for every contender, as they are for a user.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

#: The producer's `linger.ms`: librdkafka's and (since Kafka 4.0) Java's default.
LINGER_MS = 5
#: Width of the millisecond stamp that opens every value.
STAMP_DIGITS = 13
#: Shortest sleep of the pacing loop: records due meanwhile go out together.
TICK_S = 0.001
#: Bytes of unmeasured records sent to each partition after the measured ones (see
#: above): more than a kcat pipe holds back.
TRAILER_BYTES = 16 * 1024


def trailers(size: int) -> int:
    """Trailer records per partition for values of `size` bytes."""
    return -(-TRAILER_BYTES // max(size, STAMP_DIGITS))


# --------------------------------------------------------------------------- pure logic


def due(elapsed: float, rate: float, total: int) -> int:
    """How many of `total` records paced at `rate`/s are due `elapsed` s after the start.

    Record i is due at i / rate, so record 0 goes at once and `total` records span
    (total - 1) / rate seconds.
    """
    if elapsed < 0:
        return 0
    return min(total, math.floor(elapsed * rate) + 1)


def percentile(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank `q`-quantile (0 < q <= 1) of ascending `ordered` values.

    The smallest value with at least q of the values at or below it: p99 of 100 values is
    the 99th, of 1 000 values the 990th; p50 of an even count is the lower middle one.
    """
    if not ordered:
        raise ValueError("percentile of no values")
    if not 0 < q <= 1:
        raise ValueError(f"quantile {q} is not in (0, 1]")
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def stamp(value: bytes, millis: int) -> bytes:
    """`value` with its first 13 bytes replaced by the zero-padded millisecond stamp."""
    head = b"%0*d" % (STAMP_DIGITS, millis)
    return head + value[STAMP_DIGITS:]


def read_stamp(value: bytes) -> int:
    """The millisecond stamp that opens a value written by `stamp`."""
    head = value[:STAMP_DIGITS]
    if len(head) != STAMP_DIGITS or not head.isdigit():
        raise ValueError(f"value does not open with a {STAMP_DIGITS}-digit stamp: {head!r}")
    return int(head)


@dataclass(frozen=True)
class Latencies:
    """What the measuring consumer saw, in milliseconds; `None`s when nothing arrived."""

    expected: int  # records the producer delivered to the source
    seen: int  # distinct records seen on the target
    duplicates: int  # records seen more than once (a copier's retry)
    timestamps_kept: int  # copies whose target CreateTime equals the source's
    p50: float | None
    p99: float | None
    max: float | None
    #: p50 of the first and the last quarter of the records, in source order: a copier
    #: that cannot keep up shows a last quarter well above the first.
    first_quarter_p50: float | None
    last_quarter_p50: float | None
    #: p99 of the last quarter: the tail once a contender has run for a while (a JVM has
    #: compiled its code by then).
    last_quarter_p99: float | None


def summarise(by_sequence: Sequence[float], duplicates: int, timestamps_kept: int) -> Latencies:
    """Summarise latencies indexed by the record's sequence number (NaN: never seen)."""
    seen = [x for x in by_sequence if not math.isnan(x)]
    if not seen:
        return Latencies(len(by_sequence), 0, duplicates, timestamps_kept,
                         None, None, None, None, None, None)
    ordered = sorted(seen)
    quarter = max(1, len(seen) // 4)
    last = sorted(seen[-quarter:])
    return Latencies(
        expected=len(by_sequence), seen=len(seen), duplicates=duplicates,
        timestamps_kept=timestamps_kept,
        p50=percentile(ordered, 0.5), p99=percentile(ordered, 0.99), max=ordered[-1],
        first_quarter_p50=percentile(sorted(seen[:quarter]), 0.5),
        last_quarter_p50=percentile(last, 0.5),
        last_quarter_p99=percentile(last, 0.99),
    )


@dataclass(frozen=True)
class Pacing:
    """How the paced producer did."""

    records: int  # delivered to the source
    seconds: float  # from the first produce() to the last
    achieved_rate: float  # records / s over those seconds
    worst_behind_s: float  # the most any record went out after its due time
    failed: int  # delivery errors


# --------------------------------------------------------------------------- producer


def produce(bootstrap: str, topic: str, partitions: int, rate: float, duration: float,
            size: int) -> Pacing:
    """Send `rate` * `duration` records, paced; blocks (run it in a process of its own)."""
    from confluent_kafka import Producer

    total = max(1, round(rate * duration))
    width = max(size, STAMP_DIGITS)
    filler = b"x" * width
    failed = 0

    def delivered(err: object, _msg: object) -> None:
        nonlocal failed
        if err is not None:
            failed += 1

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "linger.ms": LINGER_MS,
        "acks": "all",
        "queue.buffering.max.messages": 1_000_000,
    })
    # Connect and learn the partitions before the clock starts.
    producer.list_topics(topic, timeout=30)
    send = producer.produce
    sent, worst = 0, 0.0
    clock = time.perf_counter
    first = last = start = clock()
    while sent < total:
        now = clock() - start
        target = due(now, rate, total)
        if target > sent:
            worst = max(worst, now - sent / rate)
            while sent < target:
                millis = time.time_ns() // 1_000_000
                try:
                    send(topic, stamp(filler, millis), b"%010d" % sent, sent % partitions,
                         on_delivery=delivered, timestamp=millis)
                except BufferError:
                    producer.poll(0.01)
                    continue
                sent += 1
            last = clock()
            producer.poll(0)
        else:
            time.sleep(max(TICK_S, sent / rate - now))
    for trailer in range(trailers(size) * partitions):  # see the module's docstring
        send(topic, stamp(filler, time.time_ns() // 1_000_000), b"%010d" % (total + trailer),
             trailer % partitions, on_delivery=delivered)
    remaining = producer.flush(120)
    records = max(0, total - remaining - failed)  # the measured ones, trailers aside
    seconds = last - first
    return Pacing(records, seconds, (total - 1) / seconds if seconds > 0 else float(total),
                  worst, failed + remaining)


# --------------------------------------------------------------------------- measurer


def measure(bootstrap: str, topic: str, partitions: int, count: int, size: int,
            limit: float, ready: Callable[[], None] | None = None) -> Latencies:
    """Read the `count` measured records from every partition's beginning; blocks.

    Stops when every sequence number 0..count-1 has been seen, or after `limit` seconds of
    seeing nothing new. `ready` (a callable) is called once every partition has answered
    a fetch, so records produced after it are read as soon as they land.
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-latency-{os.getpid()}",  # needed by the client, never committed
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "fetch.wait.max.ms": 100,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    latencies = array("d", [math.nan]) * count
    seen = duplicates = kept = 0
    at_end: set[int] = set()
    announced = False
    quiet_since = time.monotonic()
    try:
        while seen < count and time.monotonic() - quiet_since < limit:
            first = consumer.poll(0.1)
            if first is None:
                continue
            batch = [first, *consumer.consume(10_000, 0)]
            now_ms = time.time_ns() / 1e6
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition() or 0)
                        continue
                    raise RuntimeError(f"measuring consumer: {err}")
                key = msg.key() or b""
                if not key.isdigit():
                    continue  # a warm-up record
                sequence = int(key)
                if count <= sequence < count + trailers(size) * partitions:
                    continue  # a trailer
                if not 0 <= sequence < count:
                    raise RuntimeError(f"unexpected record key {msg.key()!r} on {topic}")
                source_ms = read_stamp(msg.value() or b"")
                if not math.isnan(latencies[sequence]):
                    duplicates += 1
                    continue
                latencies[sequence] = now_ms - source_ms
                seen += 1
                kept += msg.timestamp()[1] == source_ms
                quiet_since = time.monotonic()
            if not announced and len(at_end) == partitions:
                announced = True
                if ready is not None:
                    ready()
    finally:
        consumer.close()
    return summarise(latencies, duplicates, kept)


# --------------------------------------------------------------------------- processes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.latency",
                                     description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="role", required=True)
    p = sub.add_parser("produce")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--rate", type=float, required=True)
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--size", type=int, required=True)
    m = sub.add_parser("measure")
    m.add_argument("--bootstrap", required=True)
    m.add_argument("--topic", required=True)
    m.add_argument("--partitions", type=int, required=True)
    m.add_argument("--size", type=int, required=True)
    m.add_argument("--count", type=int, required=True)
    m.add_argument("--limit", type=float, required=True,
                   help="give up after this many seconds without a new record")
    args = parser.parse_args(argv)
    if args.role == "produce":
        result: object = produce(args.bootstrap, args.topic, args.partitions, args.rate,
                                 args.duration, args.size)
    else:
        def ready() -> None:
            print("ready", flush=True)
        result = measure(args.bootstrap, args.topic,
                         args.partitions, args.count, args.size, args.limit,
                         ready)
    print(json.dumps(asdict(result)), flush=True)  # type: ignore[call-overload]
    return 0


if __name__ == "__main__":
    sys.exit(main())
