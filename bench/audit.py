"""The audit's verification rate on the benchmark's records, per core.

The heartbeat service's audit reads every mirrored record twice -- once on the source,
once on the target -- and folds both sides into their windows' counts and checksums.
This runs that same work over the benchmark's source and target topics as the audit
readers do it (raw fetches, `mirrorline.heartbeat.audit_fold.SideFolder`: the source
side holds its batches, the target side pairs its copies with them, and whatever does
not pair is decoded and digested record by record) and divides the records by the CPU
seconds this process used for *both* sides: records verified per second per core. The
goal is to keep up with the replicator's rate per core.

In the same run it also measures the audit decoding every record on both sides (no
batch held, so none pairs: what the audit did before batches were verified whole), and
checks that both give each side the same counts per window and that each way's two
sides agree.
"""

from __future__ import annotations

import time

from aiokafka import AIOKafkaClient, TopicPartition

from bench.common import BenchEnv
from mirrorline.core.batch_audit import Pairing, other_side
from mirrorline.core.record_audit import judge
from mirrorline.heartbeat.audit_fold import Cycle, SideFolder
from mirrorline.kafka.rawbatches import RawBatches

WINDOW_MS = 60_000


class _Side:
    """One side's reads, a fetch at a time, as an audit reader makes them."""

    def __init__(self, client: AIOKafkaClient, folder: SideFolder, topic: str,
                 partitions: int, records: int) -> None:
        self.raw = RawBatches(client)
        self.folder = folder
        self.records = records
        self.positions = {TopicPartition(topic, p): 0 for p in range(partitions)}
        self.highs: dict[TopicPartition, int] = {}
        self.expected = {p: 0 for p in range(partitions)}
        self.cycles = {p: Cycle() for p in range(partitions)}

    @property
    def done(self) -> bool:
        return len(self.highs) == len(self.positions) and \
            sum(self.highs.values()) >= self.records and \
            all(self.positions[tp] >= high for tp, high in self.highs.items())

    async def step(self) -> None:
        fetched = await self.raw.fetch(self.positions, max_wait_ms=100)
        now = int(time.time() * 1000)
        for tp, part in fetched.items():
            part.check(tp)
            self.highs[tp] = part.high_watermark
            name, cycle = str(tp.partition), self.cycles[tp.partition]
            self.positions[tp] = self.folder.read(name, part.records, self.positions[tp],
                                                  where=str(tp), aborted=None, now_ms=now,
                                                  cycle=cycle)
            self.expected[tp.partition] = self.folder.drain(
                name, self.expected[tp.partition], now, cycle, where=str(tp))


async def verify_rate(env: BenchEnv, *, paired: bool
                      ) -> tuple[float, float, dict[int, dict[str, list[int]]]]:
    """(records per CPU second for both sides, per wall second, the target's sums per
    partition) of verifying the mirrored topic as the audit readers do; `paired` False
    decodes every record on both sides."""
    source = AIOKafkaClient(bootstrap_servers=env.source_bootstrap)
    target = AIOKafkaClient(bootstrap_servers=env.target_bootstrap)
    await source.bootstrap()
    await target.bootstrap()
    try:
        pairing = Pairing()
        tokens: dict[str, dict[str, dict[str, int]]] = {"source": {}, "target": {}}

        def side(name: str) -> SideFolder:
            other = other_side(name)
            return SideFolder(name, pairing if paired else Pairing(), window_ms=WINDOW_MS,
                              first=0, hold_ms=60_000 if paired else 0,
                              other_tokens=lambda part: tokens[other],
                              own_tokens=lambda part: tokens[name])

        src, tgt = side("source"), side("target")
        reads = [_Side(source, src, env.source_topic, env.partitions, env.records),
                 _Side(target, tgt, env.target_topic, env.partitions, env.records)]
        cpu, wall = time.process_time(), time.perf_counter()
        # Fetch by fetch, the source a step ahead (its records are there first).
        while not all(reading.done for reading in reads):
            for reading in reads:
                if not reading.done:
                    await reading.step()
        s_cycles, t_cycles = reads[0].cycles, reads[1].cycles
        now = int(time.time() * 1000) + 120_000
        for reading in reads:  # anything still held: its hold is over
            for p, cycle in reading.cycles.items():
                reading.folder.drain(str(p), reading.expected[p], now, cycle, where=str(p))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        for p in s_cycles:
            s, t = s_cycles[p].deltas, t_cycles[p].deltas
            bad = [(w, judge(tuple(s.get(w, [0, 0])), tuple(t.get(w, [0, 0]))))  # type: ignore[arg-type]
                   for w in set(s) | set(t)]
            bad = [(w, v) for w, v in bad if v.verdict.value != "OK"]
            if bad:
                raise RuntimeError(f"the audit's sides disagree on partition {p}: {bad}")
        seen = tgt.records
        if seen != env.records or src.records != env.records:
            raise RuntimeError(f"the audit verified {src.records} source and {seen} target "
                               f"records of {env.records}")
        if paired:
            print(f"  audit: {tgt.whole_batches} target batches verified whole "
                  f"({tgt.whole_records:,} records), the rest decoded", flush=True)
        return seen / cpu, seen / wall, {p: {w: [c[0]] for w, c in t_cycles[p].deltas.items()}
                                         for p in t_cycles}
    finally:
        await source.close()
        await target.close()


async def run(env: BenchEnv) -> tuple[float, float, float]:
    """Verify a finished mirror run, both sides: (records per CPU second, per wall second,
    and per CPU second decoding every record)."""
    per_core, per_wall, counts = await verify_rate(env, paired=True)
    before, _, counts_before = await verify_rate(env, paired=False)
    if counts != counts_before:
        raise RuntimeError("the audit's paired and decoded folds count different windows")
    return per_core, per_wall, before
