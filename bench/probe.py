"""`python -m bench.probe`: how long the Spark source's log-end probe takes per micro-batch.

`EndProbe.ends` answers the source's `latestOffset` on the driver before every
micro-batch, so its time is added to each one. One local cluster, a topic of
`--partitions` partitions (4) and a 1-partition topic; the probe is asked about all of
them, `--calls` times per case, about as often as the executor's trigger (every 200 ms),
each time from where its previous answer ended (as the source asks):

* idle: nothing is produced, every partition sits at its end;
* flowing: before each call `--batch` records go to each partition of the first topic
  (flushed, so they are in the log), the other topic stays idle.

It reports the median, 90th percentile and largest time of one call, and how many
answers missed the end the producer had reached (should be none: the probe waits for
fetch responses that arrived after it was asked).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import tempfile
import time
from pathlib import Path

from mirrorline_spark.probe import EndProbe

from bench.common import create_topics, delete_topics
from mirrorline.dev.local import start_local, stop_local

TRIGGER_S = 0.2


def _measure(bootstrap: str, flowing: str, idle: str, partitions: int, calls: int,
             batch: int, produce: bool) -> tuple[list[float], int]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    ends = {(flowing, p): 0 for p in range(partitions)} | {(idle, 0): 0}
    probe = EndProbe({"bootstrap.servers": bootstrap})
    times, missed = [], 0
    try:
        # As the source asks: from where the previous micro-batch ended.
        positions = {tp: 0 for tp in ends} | probe.ends(dict(ends))  # connects: not timed
        for _ in range(calls):
            if produce:
                for p in range(partitions):
                    for _ in range(batch):
                        producer.produce(flowing, b"v" * 100, partition=p)
                    ends[(flowing, p)] += batch
                producer.flush()
            started = time.perf_counter()
            answer = probe.ends(positions)
            times.append(time.perf_counter() - started)
            missed += sum(answer.get(tp, -1) != end for tp, end in ends.items())
            positions |= answer
            time.sleep(TRIGGER_S)
    finally:
        probe.close()
    return times, missed


def _report(case: str, times: list[float], missed: int) -> None:
    ms = sorted(t * 1000 for t in times)
    p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
    print(f"{case:<10} {len(ms):>5} {statistics.median(ms):>10.1f} {p90:>8.1f} "
          f"{ms[-1]:>8.1f} {missed:>7}", flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.probe",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50, help="calls per case")
    parser.add_argument("--partitions", type=int, default=4,
                        help="partitions of the topic records flow into")
    parser.add_argument("--batch", type=int, default=500,
                        help="records per partition before each flowing call")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-probe-") as tmp:
        broker = await start_local("kafka", "primary", Path(tmp))
        try:
            flowing, idle = f"probe-{secrets.token_hex(3)}", f"probe-idle-{secrets.token_hex(3)}"
            await create_topics(broker.bootstrap, [flowing], args.partitions)
            await create_topics(broker.bootstrap, [idle], 1)
            print(f"{'case':<10} {'calls':>5} {'median ms':>10} {'p90 ms':>8} {'max ms':>8} "
                  f"{'missed':>7}")
            for case, produce in (("idle", False), ("flowing", True)):
                times, missed = await asyncio.to_thread(
                    _measure, broker.bootstrap, flowing, idle, args.partitions, args.calls,
                    args.batch, produce)
                _report(case, times, missed)
            await delete_topics(broker.bootstrap, [flowing, idle])
        finally:
            await stop_local(broker)


if __name__ == "__main__":
    asyncio.run(main())
