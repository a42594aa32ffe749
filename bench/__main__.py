"""`python -m bench` (`make bench`): mirror throughput of each contender between local clusters.

For every scenario (N records of S bytes over 4 partitions) and every contender, a fresh
source topic is seeded (confluent-kafka, outside the timing), a fresh target topic created,
and the contender times itself from its start until the target's high watermarks add up to
N. The output is checked (per-partition counts, leading records), the topics dropped, and
one table at the end gives records/s, MB/s and every contender's ratio to every other.
MirrorMaker 2 (`mm2`) runs on Apache Kafka brokers only (the default, not `--broker
tansu`). For the contenders that are processes of their own (mirrorline, mm2) a second
table gives CPU seconds per million records copied and peak resident memory.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench import audit, kcat, mirrorline_replicator, mm2, raw_aiokafka, spark_executor
from bench.common import (
    BenchEnv,
    Contender,
    ContenderUnavailable,
    create_topics,
    delete_topics,
    make_payloads,
    seed,
    verify_mirror,
)
from mirrorline.dev.brokers import LocalBroker
from mirrorline.dev.local import describe, start_local, stop_local

#: The contenders, in table order; the first one is the baseline the others are read against.
#: Register new ones here as (name, async callable (BenchEnv) -> seconds).
CONTENDERS: list[tuple[str, Contender]] = [
    ("raw_aiokafka", raw_aiokafka.run),
    ("mirrorline", mirrorline_replicator.run),
    ("mm2", mm2.run),
    ("kcat", kcat.run),
    ("spark_local2", spark_executor.make("local[2]")),
    ("spark_local1", spark_executor.make("local[1]")),
]

SOURCE, TARGET = "source", "target"

#: Start-up seconds of each contender's runs in the current scenario.
startups: dict[str, list[float]] = {}
#: (CPU seconds, peak RSS bytes) of each contender's runs in the current scenario.
costs: dict[str, list[tuple[float, int]]] = {}


@dataclass(frozen=True)
class Scenario:
    records: int
    size: int

    @property
    def label(self) -> str:
        size = f"{self.size // 1024} KiB" if self.size % 1024 == 0 else f"{self.size} B"
        return f"{self.records:,} x {size}"


@dataclass(frozen=True)
class Result:
    scenario: Scenario
    contender: str
    seconds: float  # median over runs
    startup: float | None = None  # median seconds from launch to the first record
    cpu_seconds: float | None = None  # median CPU seconds of the contender's processes
    peak_rss: int | None = None  # largest peak resident memory over the runs, bytes

    @property
    def records_per_s(self) -> float:
        return self.scenario.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.scenario.records * self.scenario.size / self.seconds / 1e6


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, help="run one custom scenario with N records")
    parser.add_argument("--size", type=int, help="value size in bytes of the custom scenario")
    parser.add_argument("--quick", action="store_true", help="50,000 records per scenario")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--broker", choices=("kafka", "tansu"), default="kafka",
                        help="the clusters' broker: Apache Kafka (default) or Tansu")
    parser.add_argument("--runs", type=int, default=1, help="runs per contender (median kept)")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="run only these contenders (repeatable)")
    args = parser.parse_args(argv)
    unknown = set(args.only or ()) - {name for name, _ in CONTENDERS}
    if unknown:
        parser.error(f"unknown contender(s): {', '.join(sorted(unknown))}; "
                     f"known: {', '.join(name for name, _ in CONTENDERS)}")
    return args


def scenarios_for(args: argparse.Namespace) -> list[Scenario]:
    if args.records is not None or args.size is not None:
        default_records = 50_000 if args.quick else 500_000
        return [Scenario(args.records or default_records, args.size or 100)]
    if args.quick:
        return [Scenario(50_000, 100), Scenario(50_000, 1024)]
    return [Scenario(500_000, 100), Scenario(200_000, 1024)]


async def run_once(
    name: str, contender: Contender, scenario: Scenario, payloads: list[tuple[bytes, bytes]],
    source: LocalBroker, target: LocalBroker, partitions: int, workdir: Path,
    broker_kind: str,
) -> float:
    topic = f"bench-{name.replace('_', '-')}-{secrets.token_hex(3)}"
    await asyncio.gather(create_topics(source.bootstrap, [topic], partitions),
                         create_topics(target.bootstrap, [topic], partitions))
    try:
        seeded = await seed(source.bootstrap, topic, partitions, payloads)
        print(f"  seeded {scenario.records:,} records in {seeded:.2f}s", flush=True)
        run_dir = workdir / topic
        await asyncio.to_thread(run_dir.mkdir, parents=True)
        env = BenchEnv(
            source_alias=SOURCE, target_alias=TARGET,
            source_bootstrap=source.bootstrap, target_bootstrap=target.bootstrap,
            source_topic=topic, target_topic=topic, partitions=partitions,
            records=scenario.records, record_size=scenario.size, workdir=run_dir,
            broker_kind=broker_kind,
        )
        seconds = await contender(env)
        problem = await verify_mirror(env)
        if problem:
            raise RuntimeError(f"{name} mirrored wrongly: {problem}")
        start = f" (first record after {env.startup[-1]:.2f}s)" if env.startup else ""
        print(f"  {name}: {seconds:.2f}s, {scenario.records / seconds:,.0f} records/s{start}",
              flush=True)
        startups.setdefault(name, []).extend(env.startup[-1:])
        costs.setdefault(name, []).extend(env.costs[-1:])
        if name == "mirrorline":
            per_core, per_wall = await audit.run(env)
            AUDIT_RATES.setdefault(scenario, []).append(per_core)
            print(f"  audit: {per_core:,.0f} records/s verified per core ({per_wall:,.0f}/s "
                  f"wall), {per_core / (scenario.records / seconds):.2f}x the replicator's "
                  "rate", flush=True)
        return seconds
    finally:
        await asyncio.gather(delete_topics(source.bootstrap, [topic]),
                             delete_topics(target.bootstrap, [topic]),
                             return_exceptions=True)


async def bench(args: argparse.Namespace) -> list[Result]:
    contenders = [(n, c) for n, c in CONTENDERS if not args.only or n in args.only]
    workdir = Path(tempfile.mkdtemp(prefix="mirrorline-bench-"))
    print(f"brokers: {describe(args.broker)}", flush=True)
    brokers = await asyncio.gather(
        start_local(args.broker, SOURCE, workdir),
        start_local(args.broker, TARGET, workdir),
        return_exceptions=True,
    )
    started = [b for b in brokers if isinstance(b, LocalBroker)]
    results: list[Result] = []
    unavailable: set[str] = set()
    try:
        for broker in brokers:
            if isinstance(broker, BaseException):
                raise broker
        source, target = started
        for scenario in scenarios_for(args):
            print(f"scenario {scenario.label}, {args.partitions} partitions", flush=True)
            payloads = await asyncio.to_thread(make_payloads, scenario.records, scenario.size)
            # Runs are interleaved (A, B, C, A, B, C, ...) so that whatever else the machine
            # is doing meanwhile weighs on every contender alike.
            times: dict[str, list[float]] = {name: [] for name, _ in contenders}
            for _ in range(args.runs):
                for name, contender in contenders:
                    if name in unavailable:
                        continue
                    try:
                        times[name].append(await run_once(name, contender, scenario, payloads,
                                                          source, target, args.partitions,
                                                          workdir, args.broker))
                    except ContenderUnavailable as exc:
                        print(f"  SKIP {name}: {exc}", flush=True)
                        unavailable.add(name)
            results.extend(Result(scenario, name, statistics.median(runs),
                                  statistics.median(startups[name]) if startups.get(name)
                                  else None,
                                  statistics.median(c for c, _ in costs[name])
                                  if costs.get(name) else None,
                                  max(r for _, r in costs[name]) if costs.get(name) else None)
                           for name, runs in times.items() if runs)
            startups.clear()
            costs.clear()
    finally:
        await asyncio.gather(*(stop_local(b) for b in started))
        await asyncio.to_thread(shutil.rmtree, workdir, True)
    return results


#: Audit verification rates (records per CPU second) per scenario, from the mirrorline runs.
AUDIT_RATES: dict[Scenario, list[float]] = {}


def print_audit(results: list[Result]) -> None:
    for scenario, rates in AUDIT_RATES.items():
        replicator = next((r for r in results if r.scenario == scenario
                           and r.contender == "mirrorline"), None)
        rate = statistics.median(rates)
        versus = (f", {rate / replicator.records_per_s:.2f}x the replicator's "
                  f"{replicator.records_per_s:,.0f} records/s" if replicator else "")
        print(f"audit {scenario.label}: {rate:,.0f} records/s verified per core{versus}")


def print_table(results: list[Result]) -> None:
    names = list(dict.fromkeys(r.contender for r in results))
    header = ["scenario", "contender", "records/s", "MB/s", "seconds",
              *(f"x {n}" for n in names)]
    rows: list[list[str]] = []
    for result in results:
        peers = {r.contender: r for r in results if r.scenario == result.scenario}
        ratios = [f"{result.records_per_s / peers[n].records_per_s:.2f}" if n in peers else "-"
                  for n in names]
        rows.append([result.scenario.label, result.contender, f"{result.records_per_s:,.0f}",
                     f"{result.mb_per_s:.1f}", f"{result.seconds:.2f}", *ratios])
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    print()
    for row in (header, *rows):
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths,
                                                                                    strict=True))]
        print("  ".join(cells))
    print("(seconds: first record on the target to the last; MB/s counts value bytes;\n"
          " 'x NAME' = this contender's throughput / NAME's)")
    startups = [r for r in results if r.startup is not None]
    if startups:
        print("start-up, from launch to the first record on the target (not timed above):")
        for r in startups:
            print(f"  {r.scenario.label}  {r.contender}: {r.startup:.1f}s")
    priced = [r for r in results if r.cpu_seconds is not None and r.peak_rss is not None]
    if priced:
        print("cost, the contender's own processes (CPU over the timed window, peak RSS):")
        for r in priced:
            assert r.cpu_seconds is not None and r.peak_rss is not None
            per_million = r.cpu_seconds / r.scenario.records * 1e6
            print(f"  {r.scenario.label}  {r.contender}: {per_million:.1f} CPU s per million "
                  f"records, {r.peak_rss / 2**20:.0f} MiB peak RSS")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        results = asyncio.run(bench(args))
    except KeyboardInterrupt:
        return 130
    if not results:
        print("no contender ran", file=sys.stderr)
        return 1
    print_table(results)
    print_audit(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
