"""`python -m bench` (`make bench`): mirror throughput of each contender between local clusters.

For every scenario (N records of S bytes over 4 partitions, uncompressed or compressed with
one of Kafka's codecs) and every contender, a fresh source topic is seeded (confluent-kafka,
outside the timing), a fresh target topic created, and the contender times itself from its
start until the target's high watermarks add up to N. The output is checked (per-partition
counts, leading records, and the target's first batches: their codec, and whether they are
the source's bytes -- `bench/batchcheck.py`), the topics dropped, and one table at the end
gives records/s, MB/s, CPU seconds per million records and every contender's ratio to every
other. The replicator runs twice, on the batch path and on the record path. MirrorMaker 2
(`mm2`) runs on Apache Kafka brokers only (the default, not `--broker tansu`). A second
table says where the machine's CPU went during each timed window: the contender, the
brokers, the bench itself, other processes, idle -- what limits each figure.

Then every contender runs once at a steady rate (`--rate` records/s of `--size` bytes for
`--duration` s; `--quick`: 10 s) and a third table gives the end-to-end latency from each
record's source CreateTime to its arrival on the target: p50, p99 and max, against MM2's
in the same run (see `bench/latency.py` for how it is measured).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench import (
    audit,
    batchcheck,
    cpu,
    kcat,
    latency,
    mirrorline_replicator,
    mm2,
    raw_aiokafka,
    spark_executor,
)
from bench.common import (
    BenchEnv,
    Contender,
    ContenderUnavailable,
    HighWatermarks,
    Usage,
    create_topics,
    delete_topics,
    make_payloads,
    make_text_payloads,
    seed,
    verify_mirror,
)
from mirrorline.dev.brokers import LocalBroker
from mirrorline.dev.local import describe, start_local, stop_local
from mirrorline.runtime import tune_kafka_io

#: The contenders, in table order; the first one is the baseline the others are read against.
#: Register new ones here as (name, async callable (BenchEnv) -> seconds).
CONTENDERS: list[tuple[str, Contender]] = [
    ("raw_aiokafka", raw_aiokafka.run),
    ("mirrorline_batch", mirrorline_replicator.make("on")),
    ("mirrorline_records", mirrorline_replicator.make("off")),
    ("mm2", mm2.run),
    ("kcat", kcat.run),
    ("spark_local2", spark_executor.make("local[2]")),
    ("spark_local1", spark_executor.make("local[1]")),
]

#: `--only mirrorline` names both replicator contenders.
ALIASES = {"mirrorline": ("mirrorline_batch", "mirrorline_records")}
#: The batch path contender: a run whose target batches are not the source's says so.
BATCH_PATH = "mirrorline_batch"
#: The audit is measured after the first of these in a scenario (it reads both sides).
AUDITED = ("mirrorline_batch", "mirrorline_records")
#: Kafka's codecs, in the order their scenarios run.
CODECS = ("lz4", "zstd", "snappy", "gzip")

SOURCE, TARGET = "source", "target"

#: Start-up seconds of each contender's runs in the current scenario.
startups: dict[str, list[float]] = {}
#: Where the CPU went in each contender's runs in the current scenario.
usages: dict[str, list[Usage]] = {}
#: The target-batch check of each contender's last run in the current scenario.
checks: dict[str, batchcheck.BatchCheck] = {}
#: What the replicator's status said of its copy path in its last run in the scenario.
paths: dict[str, str] = {}


@dataclass(frozen=True)
class Scenario:
    records: int
    size: int
    codec: str = "none"

    @property
    def label(self) -> str:
        size = f"{self.size // 1024} KiB" if self.size % 1024 == 0 else f"{self.size} B"
        return f"{self.records:,} x {size}" + (f" {self.codec}" if self.codec != "none" else "")


@dataclass(frozen=True)
class Result:
    scenario: Scenario
    contender: str
    seconds: float  # median over runs
    startup: float | None = None  # median seconds from launch to the first record
    usage: Usage | None = None  # field by field, the median over runs (peak RSS: the largest)
    check: batchcheck.BatchCheck | None = None  # the target's batches, last run
    copy_path: str | None = None  # the replicator's status of its partitions, last run

    @property
    def cpu_seconds(self) -> float | None:
        """CPU seconds of the contender's own processes over the timed window."""
        return self.usage.contender if self.usage is not None else None

    @property
    def cpu_per_million(self) -> float | None:
        cpu = self.cpu_seconds
        return None if cpu is None else cpu / self.scenario.records * 1e6

    @property
    def peak_rss(self) -> int | None:
        return self.usage.peak_rss if self.usage is not None else None

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
    parser.add_argument("--quick", action="store_true",
                        help="50,000 records per scenario, lz4 the only compressed one")
    parser.add_argument("--codec", action="append", choices=("none", *CODECS),
                        help="run only these codecs' scenarios (repeatable; 'none': the "
                             "uncompressed ones). Default: none and every codec; with "
                             "--quick none and lz4; with --records/--size none")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--broker", choices=("kafka", "tansu"), default="kafka",
                        help="the clusters' broker: Apache Kafka (default) or Tansu")
    parser.add_argument("--runs", type=int, default=1, help="runs per contender (median kept)")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="run only these contenders (repeatable; 'mirrorline' names "
                             "both mirrorline_batch and mirrorline_records)")
    steady = parser.add_argument_group("latency at a steady rate (one run per contender)")
    steady.add_argument("--rate", type=float, default=20_000,
                        help="records/s the producer sends (default 20 000)")
    steady.add_argument("--duration", type=float,
                        help="seconds the producer sends for (default 60, 10 with --quick)")
    skip = steady.add_mutually_exclusive_group()
    skip.add_argument("--latency-only", action="store_true", help="skip the throughput runs")
    skip.add_argument("--no-latency", action="store_true", help="skip the latency runs")
    args = parser.parse_args(argv)
    if args.duration is None:
        args.duration = 10.0 if args.quick else 60.0
    if args.rate <= 0 or args.duration <= 0:
        parser.error("--rate and --duration must be positive")
    unknown = set(args.only or ()) - {name for name, _ in CONTENDERS} - set(ALIASES)
    if unknown:
        parser.error(f"unknown contender(s): {', '.join(sorted(unknown))}; "
                     f"known: {', '.join(name for name, _ in CONTENDERS)}")
    if args.only:
        args.only = [n for name in args.only for n in ALIASES.get(name, (name,))]
    return args


def scenarios_for(args: argparse.Namespace) -> list[Scenario]:
    """The scenarios to run: uncompressed 100 B and 1 KiB records, then 1 KiB records of
    each codec (the size of a typical JSON event, where compression is usually set)."""
    if args.records is not None or args.size is not None:
        default_records = 50_000 if args.quick else 500_000
        return [Scenario(args.records or default_records, args.size or 100, codec)
                for codec in args.codec or ["none"]]
    codecs = args.codec or (["none", "lz4"] if args.quick else ["none", *CODECS])
    records = 50_000 if args.quick else 200_000
    out = []
    if "none" in codecs:
        out += ([Scenario(50_000, 100), Scenario(50_000, 1024)] if args.quick
                else [Scenario(500_000, 100), Scenario(200_000, 1024)])
    return out + [Scenario(records, 1024, codec) for codec in CODECS if codec in codecs]


async def run_once(
    name: str, contender: Contender, scenario: Scenario, payloads: list[tuple[bytes, bytes]],
    source: LocalBroker, target: LocalBroker, partitions: int, workdir: Path,
    broker_kind: str, audited: str | None,
) -> float:
    topic = f"bench-{name.replace('_', '-')}-{secrets.token_hex(3)}"
    await asyncio.gather(create_topics(source.bootstrap, [topic], partitions),
                         create_topics(target.bootstrap, [topic], partitions))
    try:
        seeded = await seed(source.bootstrap, topic, partitions, payloads, scenario.codec)
        print(f"  seeded {scenario.records:,} records in {seeded:.2f}s", flush=True)
        run_dir = workdir / topic
        await asyncio.to_thread(run_dir.mkdir, parents=True)
        env = BenchEnv(
            source_alias=SOURCE, target_alias=TARGET,
            source_bootstrap=source.bootstrap, target_bootstrap=target.bootstrap,
            source_topic=topic, target_topic=topic, partitions=partitions,
            records=scenario.records, record_size=scenario.size, workdir=run_dir,
            broker_kind=broker_kind, codec=scenario.codec,
            broker_pids=source.all_pids + target.all_pids,
        )
        seconds = await contender(env)
        problem = await verify_mirror(env)
        if problem:
            raise RuntimeError(f"{name} mirrored wrongly: {problem}")
        check = await batchcheck.check(env.source_bootstrap, env.target_bootstrap,
                                       env.source_topic, env.target_topic, env.partitions)
        if name.startswith("mirrorline") and not check.codec_kept:
            raise RuntimeError(f"{name} mirrored wrongly: the source's batches are "
                               f"{'/'.join(check.source_codecs)}, the target's "
                               f"{'/'.join(check.target_codecs)}")
        start = f" (first record after {env.startup[-1]:.2f}s)" if env.startup else ""
        print(f"  {name}: {seconds:.2f}s, {scenario.records / seconds:,.0f} records/s{start}; "
              f"{_usage_line(env.usage[-1], scenario.records)}; target: {check.describe()}",
              flush=True)
        if env.copy_paths:
            print(f"  {name}'s status: {env.copy_paths[-1]}", flush=True)
            paths[name] = env.copy_paths[-1]
        if name == BATCH_PATH and not check.all_verbatim:
            print(f"  note: {check.compared - check.verbatim} of {check.compared} target "
                  f"batches looked at are not the source's: {name} did not copy them as "
                  "batches (its figures are the record path's where it did not)", flush=True)
        startups.setdefault(name, []).extend(env.startup[-1:])
        usages.setdefault(name, []).extend(env.usage[-1:])
        checks[name] = check
        if name == audited:
            per_core, per_wall, before = await audit.run(env)
            AUDIT_RATES.setdefault(scenario, []).append(per_core)
            print(f"  audit: {per_core:,.0f} records/s verified per core, both sides "
                  f"({per_wall:,.0f}/s wall), {per_core / (scenario.records / seconds):.2f}x "
                  f"{name}'s rate; decoding every record: {before:,.0f}/s, "
                  f"{before / (scenario.records / seconds):.2f}x", flush=True)
        return seconds
    finally:
        await asyncio.gather(delete_topics(source.bootstrap, [topic]),
                             delete_topics(target.bootstrap, [topic]),
                             return_exceptions=True)


#: Warm-up records per partition, seeded before a steady-rate run: the run measures only
#: once the contender has copied them, so its start-up is not counted as latency: most of
#: them, as kcat's producer holds a partition's newest records until more input follows.
WARMUP_PER_PARTITION = 10
#: The measuring consumer gives up after this many seconds without a new record.
QUIET_LIMIT_S = 120.0


@dataclass(frozen=True)
class LatencyResult:
    contender: str
    rate: float  # what the producer was asked for, records/s
    pacing: latency.Pacing
    latencies: latency.Latencies
    load: tuple[float, float]  # 1-minute load average before and after the run


def _helper_env() -> dict[str, str]:
    """The environment of the producer and measurer processes: `bench` importable."""
    root = str(Path(__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{path}" if path else root}


async def _until_copied(env: BenchEnv, least: int, task: asyncio.Future[float],
                        limit: float) -> None:
    """Wait until every target partition holds `least` records, or the task fails."""
    deadline = asyncio.get_running_loop().time() + limit
    async with HighWatermarks(env.target_bootstrap, env.target_topic, env.partitions) as marks:
        while True:
            ends = await marks.log_ends()
            if (min(ends.values()) >= least
                    and min((await marks.confirm(ends)).values()) >= least):
                return
            if task.done():
                task.result()  # raises the contender's error
                raise RuntimeError("the contender stopped before copying the warm-up records")
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"warm-up records not copied after {limit:g}s: {ends}")
            await asyncio.sleep(0.05)


async def run_latency(name: str, contender: Contender, args: argparse.Namespace,
                      source: LocalBroker, target: LocalBroker, workdir: Path,
                      ) -> LatencyResult:
    """One steady-rate run of `contender`, measured by the shared producer and measurer."""
    size = args.size or 100
    partitions = args.partitions
    total = max(1, round(args.rate * args.duration))
    warmup = WARMUP_PER_PARTITION * partitions
    topic = f"latency-{name.replace('_', '-')}-{secrets.token_hex(3)}"
    await asyncio.gather(create_topics(source.bootstrap, [topic], partitions),
                         create_topics(target.bootstrap, [topic], partitions))
    helpers: list[asyncio.subprocess.Process] = []
    copier: asyncio.Future[float] | None = None
    try:
        # Keys that are not numbers: the measuring consumer passes these by.
        await seed(source.bootstrap, topic, partitions,
                   [(b"warm-up-%d" % i, value)
                    for i, (_, value) in enumerate(make_payloads(warmup, size))])
        run_dir = workdir / topic
        await asyncio.to_thread(run_dir.mkdir, parents=True)
        env = BenchEnv(
            source_alias=SOURCE, target_alias=TARGET,
            source_bootstrap=source.bootstrap, target_bootstrap=target.bootstrap,
            source_topic=topic, target_topic=topic, partitions=partitions,
            records=warmup + total + latency.trailers(size) * partitions, record_size=size,
            workdir=run_dir,
            broker_kind=args.broker, follow=True,
            broker_pids=source.all_pids + target.all_pids,
        )
        load_before = os.getloadavg()[0]
        copier = asyncio.ensure_future(contender(env))
        await _until_copied(env, WARMUP_PER_PARTITION // 2, copier, limit=300)
        print(f"  {name}: copying (start-up {env.startup[-1]:.1f}s)" if env.startup else
              f"  {name}: copying", flush=True)
        common = ["--bootstrap"]
        measurer = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.latency", "measure", *common, target.bootstrap,
            "--topic", topic, "--partitions", str(partitions), "--size", str(size),
            "--count", str(total), "--limit", str(QUIET_LIMIT_S),
            stdout=asyncio.subprocess.PIPE, env=_helper_env())
        helpers.append(measurer)
        assert measurer.stdout is not None
        line = await asyncio.wait_for(measurer.stdout.readline(), 60)
        if line.strip() != b"ready":
            raise RuntimeError(f"measuring consumer did not start: {line!r}")
        producer = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.latency", "produce", *common, source.bootstrap,
            "--topic", topic, "--partitions", str(partitions), "--rate", str(args.rate),
            "--duration", str(args.duration), "--size", str(size),
            stdout=asyncio.subprocess.PIPE, env=_helper_env())
        helpers.append(producer)
        out, _ = await producer.communicate()
        if producer.returncode != 0:
            raise RuntimeError(f"producer exited {producer.returncode}")
        pacing = latency.Pacing(**json.loads(out))
        print(f"  produced {pacing.records:,} records at {pacing.achieved_rate:,.0f}/s "
              f"(asked {args.rate:,.0f}/s, at worst {pacing.worst_behind_s * 1000:.0f} ms "
              f"behind schedule, {pacing.failed} failed)", flush=True)
        out, _ = await measurer.communicate()
        if measurer.returncode != 0:
            raise RuntimeError(f"measuring consumer exited {measurer.returncode}")
        measured = latency.Latencies(**json.loads(out))
        load_after = os.getloadavg()[0]
        if copier.done():
            copier.result()  # a contender that failed meanwhile: raise its error
        result = LatencyResult(name, args.rate, pacing, measured, (load_before, load_after))
        print(f"  {name}: {_latency_line(result)}", flush=True)
        return result
    finally:
        for proc in helpers:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        if copier is not None:
            if not copier.done():
                copier.cancel()
            await asyncio.gather(copier, return_exceptions=True)
        await asyncio.gather(delete_topics(source.bootstrap, [topic]),
                             delete_topics(target.bootstrap, [topic]),
                             return_exceptions=True)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def _latency_line(r: LatencyResult) -> str:
    m = r.latencies
    return (f"p50 {_ms(m.p50)} ms, p99 {_ms(m.p99)} ms, max {_ms(m.max)} ms "
            f"({m.seen:,} of {m.expected:,} seen; p50 first quarter {_ms(m.first_quarter_p50)}"
            f" ms, last quarter {_ms(m.last_quarter_p50)} ms, p99 {_ms(m.last_quarter_p99)} ms)")


async def bench(args: argparse.Namespace) -> tuple[list[Result], list[LatencyResult]]:
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
    steady: list[LatencyResult] = []
    unavailable: set[str] = set()
    try:
        for broker in brokers:
            if isinstance(broker, BaseException):
                raise broker
        source, target = started
        for scenario in [] if args.latency_only else scenarios_for(args):
            print(f"scenario {scenario.label}, {args.partitions} partitions", flush=True)
            make = make_payloads if scenario.codec == "none" else make_text_payloads
            payloads = await asyncio.to_thread(make, scenario.records, scenario.size)
            names = [name for name, _ in contenders if name not in unavailable]
            audited = next((name for name in AUDITED if name in names), None)
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
                                                          workdir, args.broker, audited))
                    except ContenderUnavailable as exc:
                        print(f"  SKIP {name}: {exc}", flush=True)
                        unavailable.add(name)
            results.extend(Result(scenario, name, statistics.median(runs),
                                  statistics.median(startups[name]) if startups.get(name)
                                  else None,
                                  median_usage(usages[name]) if usages.get(name) else None,
                                  checks.get(name), paths.get(name))
                           for name, runs in times.items() if runs)
            startups.clear()
            usages.clear()
            checks.clear()
            paths.clear()
        if not args.no_latency:
            print(f"steady rate: {args.rate:,.0f} records/s of {args.size or 100} B over "
                  f"{args.partitions} partitions for {args.duration:g}s", flush=True)
        for name, contender in [] if args.no_latency else contenders:
            if name in unavailable:
                continue
            try:
                steady.append(await run_latency(name, contender, args, source, target,
                                                workdir))
            except ContenderUnavailable as exc:
                print(f"  SKIP {name}: {exc}", flush=True)
                unavailable.add(name)
    finally:
        await asyncio.gather(*(stop_local(b) for b in started))
        await asyncio.to_thread(shutil.rmtree, workdir, True)
    return results, steady


def _median_or_none(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def median_usage(runs: list[Usage]) -> Usage:
    """Each field's median over `runs` (the peak resident memory: the largest)."""
    peaks = [u.peak_rss for u in runs if u.peak_rss is not None]
    return Usage(
        seconds=statistics.median(u.seconds for u in runs),
        contender=_median_or_none([u.contender for u in runs]),
        brokers=statistics.median(u.brokers for u in runs),
        harness=_median_or_none([u.harness for u in runs]),
        busy=statistics.median(u.busy for u in runs),
        capacity=statistics.median(u.capacity for u in runs),
        peak_rss=max(peaks) if peaks else None,
    )


def _usage_line(u: Usage, records: int) -> str:
    mine = f"{u.contender / records * 1e6:.1f} CPU s per million records, " \
        if u.contender is not None else ""
    coarse = (f" (a window of {u.seconds:.2f}s: CPU is counted in ticks of "
              f"{1000 / cpu.TICK:g} ms, too coarse for it)" if u.seconds < COARSE_S else "")
    return (f"{mine}brokers {u.brokers / records * 1e6:.1f}; machine "
            f"{u.busy / u.seconds:.2f} of {u.capacity / u.seconds:.2f} cores busy{coarse}")


#: A timed window shorter than this gives CPU figures a run's reader should not trust.
COARSE_S = 1.0
#: A core counts as fully used from this share on (scheduling and sampling leave a little).
FULL = 0.9


def limit(u: Usage) -> str:
    """What the figures say limited a run, in words (the numbers are printed beside it)."""
    cores = u.capacity / u.seconds
    idle = (u.capacity - u.busy) / u.seconds
    mine = (u.contender or 0.0) / u.seconds
    brokers = u.brokers / u.seconds
    if idle < (1 - FULL) * cores:
        biggest = max((mine, "the contender"), (brokers, "the brokers"),
                      (u.others / u.seconds, "other processes"))
        return f"the {cores:.0f} cores (busiest: {biggest[1]})"
    if u.contender is not None and mine >= FULL:
        return "the contender's core" if mine < 1 + FULL else "the contender's cores"
    return "neither CPU: waiting (round trips, acks)"


#: Audit verification rates (records per CPU second) per scenario, from the mirrorline runs.
AUDIT_RATES: dict[Scenario, list[float]] = {}


def print_audit(results: list[Result]) -> None:
    for scenario, rates in AUDIT_RATES.items():
        replicator = next((r for name in AUDITED for r in results if r.scenario == scenario
                           and r.contender == name), None)
        rate = statistics.median(rates)
        versus = (f", {rate / replicator.records_per_s:.2f}x {replicator.contender}'s "
                  f"{replicator.records_per_s:,.0f} records/s" if replicator else "")
        per_m = replicator.cpu_per_million if replicator else None
        if per_m:  # the replicator's records per CPU second
            versus += f", {rate * per_m / 1e6:.2f}x its {1e6 / per_m:,.0f} per core"
        print(f"audit {scenario.label}: {rate:,.0f} records/s verified per core{versus}")


def _print_rows(header: list[str], rows: list[list[str]], left: int = 2) -> None:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    print()
    for row in (header, *rows):
        print("  ".join(c.ljust(w) if i < left else c.rjust(w)
                        for i, (c, w) in enumerate(zip(row, widths, strict=True))))


def _batches(check: batchcheck.BatchCheck | None) -> str:
    if check is None:
        return "-"
    codec = "/".join(check.target_codecs) or "-"
    return f"{codec}, {check.verbatim}/{check.compared}"


def print_table(results: list[Result]) -> None:
    names = list(dict.fromkeys(r.contender for r in results))
    header = ["scenario", "contender", "records/s", "MB/s", "seconds", "CPU s/M",
              "target batches", *(f"x {n}" for n in names)]
    rows: list[list[str]] = []
    for result in results:
        peers = {r.contender: r for r in results if r.scenario == result.scenario}
        ratios = [f"{result.records_per_s / peers[n].records_per_s:.2f}" if n in peers else "-"
                  for n in names]
        per_million = result.cpu_per_million
        rows.append([result.scenario.label, result.contender, f"{result.records_per_s:,.0f}",
                     f"{result.mb_per_s:.1f}", f"{result.seconds:.2f}",
                     "-" if per_million is None else f"{per_million:.1f}",
                     _batches(result.check), *ratios])
    _print_rows(header, rows)
    print("(seconds: first record on the target to the last; MB/s counts value bytes;\n"
          " CPU s/M: CPU seconds of the contender's processes and their children per million\n"
          " records, over the same window (raw_aiokafka: the bench process, its watcher\n"
          " included); target batches: their codec, and how many of the first ones per\n"
          " partition hold the source's records section byte for byte (the batch path's\n"
          " mark); 'x NAME' = this contender's throughput / NAME's)")
    print_limits(results)
    startups = [r for r in results if r.startup is not None]
    if startups:
        print("start-up, from launch to the first record on the target (not timed above):")
        for r in startups:
            print(f"  {r.scenario.label}  {r.contender}: {r.startup:.1f}s")
    said = [r for r in results if r.copy_path is not None]
    if said:
        print("copy path, as the replicator's status gave it for the partitions (last run):")
        for r in said:
            print(f"  {r.scenario.label}  {r.contender}: {r.copy_path}")
    priced = [r for r in results if r.peak_rss]
    if priced:
        print("peak resident memory of the contender's own processes (VmHWM, largest run):")
        for r in priced:
            assert r.peak_rss is not None
            print(f"  {r.scenario.label}  {r.contender}: {r.peak_rss / 2**20:.0f} MiB")


def print_limits(results: list[Result]) -> None:
    """Where the machine's CPU went during each timed window, in cores, and the verdict."""
    header = ["scenario", "contender", "contender", "brokers", "bench", "others", "idle",
              "brokers CPU s/M", "x batch CPU/rec", "limit"]
    rows: list[list[str]] = []
    for r in results:
        u = r.usage
        if u is None:
            continue
        batch = next((b for b in results if b.scenario == r.scenario
                      and b.contender == BATCH_PATH), None)
        mine, theirs = r.cpu_per_million, batch.cpu_per_million if batch else None
        rows.append([
            r.scenario.label, r.contender,
            "-" if u.contender is None else f"{u.contender / u.seconds:.2f}",
            f"{u.brokers / u.seconds:.2f}",
            "-" if u.harness is None else f"{u.harness / u.seconds:.2f}",
            f"{u.others / u.seconds:.2f}", f"{(u.capacity - u.busy) / u.seconds:.2f}",
            f"{u.brokers / r.scenario.records * 1e6:.1f}",
            f"{mine / theirs:.2f}" if mine is not None and theirs else "-",
            limit(u),
        ])
    if not rows:
        return
    _print_rows(header, rows)
    print("(cores: CPU seconds / timed seconds, medians over runs: the contender's processes,\n"
          " both clusters' brokers, the bench process (its watcher; the raw loop's own figure\n"
          " includes it), other processes on the machine, idle; brokers CPU s/M: the brokers'\n"
          " CPU seconds per million records copied; 'x batch CPU/rec' = CPU per record / the\n"
          " batch path's; limit: the machine's cores when under a tenth of them was idle,\n"
          " else the contender's core when it used 0.9 or more of one, else waiting)")


def print_latency_table(results: list[LatencyResult]) -> None:
    baseline = next((r for r in results if r.contender == "mm2"), None)
    header = ["contender", "asked/s", "produced/s", "seen", "p50 ms", "p99 ms", "max ms",
              "p50 1st/last quarter", "p99 last quarter", "CreateTime kept", "load",
              "p50 x mm2", "p99 x mm2"]
    rows: list[list[str]] = []
    for r in results:
        m = r.latencies

        def ratio(mine: float | None, theirs: float | None) -> str:
            return f"{mine / theirs:.3g}" if mine is not None and theirs else "-"

        rows.append([
            r.contender, f"{r.rate:,.0f}", f"{r.pacing.achieved_rate:,.0f}",
            f"{m.seen:,}/{m.expected:,}", _ms(m.p50), _ms(m.p99), _ms(m.max),
            f"{_ms(m.first_quarter_p50)}/{_ms(m.last_quarter_p50)}", _ms(m.last_quarter_p99),
            "yes" if m.seen and m.timestamps_kept == m.seen else f"no ({m.timestamps_kept:,})",
            f"{r.load[0]:.1f}-{r.load[1]:.1f}",
            ratio(m.p50, baseline.latencies.p50 if baseline else None),
            ratio(m.p99, baseline.latencies.p99 if baseline else None),
        ])
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    print()
    for row in (header, *rows):
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(row, widths, strict=True))))
    print("(latency: the source record's CreateTime to the measuring consumer on the target\n"
          " seeing its copy -- the same consumer for every contender, its own delay in every\n"
          " figure; 'x mm2' = this contender's latency / MM2's, lower is better; load: the\n"
          " 1-minute load average before and after the run)")
    for r in results:
        if r.pacing.achieved_rate < 0.98 * r.rate:
            print(f"  note: the producer did not hold the rate in {r.contender}'s run "
                  f"({r.pacing.achieved_rate:,.0f}/s of {r.rate:,.0f}/s)")
        if r.latencies.seen < r.latencies.expected:
            print(f"  note: {r.contender} copied {r.latencies.seen:,} of "
                  f"{r.latencies.expected:,} records before {QUIET_LIMIT_S:g}s passed "
                  "without a new one")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # What every service runs with (`mirrorline.runtime.tune_kafka_io`: allocator, flat
    # produce requests, connection I/O): the audit measured in this process is then
    # measured as the heartbeat service runs it, and the raw aiokafka loop gets them too
    # (a stronger baseline, not a weaker one).
    tune_kafka_io()
    try:
        results, steady = asyncio.run(bench(args))
    except KeyboardInterrupt:
        return 130
    if not results and not steady:
        print("no contender ran", file=sys.stderr)
        return 1
    if results:
        print_table(results)
        print_audit(results)
    if steady:
        print_latency_table(steady)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
