"""Exactly-once mode: one target transaction per delivery round.

The producer is mocked because no broker reachable here supports aiokafka transactions
(Tansu refuses aiokafka's InitProducerId v0, and shows aborted records to read_committed
readers anyway). The stand-in records every call in order and keeps a small model of the
target's logs: records written in a transaction become visible to a read_committed reader
only when it commits, and take offsets (plus one for each marker) whether or not it does.
Everything else is the real code: pumps, the round logic, the bookkeeping records.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, ProducerFenced

from mirrorline.core.backoff import Backoff
from mirrorline.core.exactly_once import transactional_id
from mirrorline.core.offset_syncs import OffsetSyncPlanner
from mirrorline.core.progress import decode_source_progress, progress_topic
from mirrorline.core.wire import OffsetSync
from mirrorline.replicator.pump import Delivered, PartitionPump, PumpState
from mirrorline.replicator.transactional import RoundBooks, TransactionalDelivery
from mirrorline.v1 import offset_map_pb2

SOURCE = "primary"
PROGRESS = progress_topic(SOURCE)
MAP = "mirrorline-offset-map.primary.internal"
SYNCS = "mm2-offset-syncs.backup.internal"


@dataclass
class Rec:
    offset: int
    value: bytes | None
    key: bytes | None = b"k"
    timestamp: int = 1_700_000_000_000
    headers: tuple[tuple[str, bytes], ...] = ()
    topic: str = "orders"
    partition: int = 0


@dataclass
class Meta:
    offset: int


@dataclass
class Batch:
    records: list[tuple[Any, ...]] = field(default_factory=list)

    def append(self, *, timestamp: int, key: bytes | None, value: bytes | None,
               headers: list[tuple[str, bytes]]) -> object:
        self.records.append((key, value))
        return object()


@dataclass
class Entry:
    key: bytes | None
    value: bytes | None
    state: str  # open, committed, aborted, marker


class Target:
    """The target cluster's logs, as far as transactions are concerned."""

    def __init__(self) -> None:
        self.logs: dict[tuple[str, int], list[Entry]] = {}

    def append(self, topic: str, partition: int, key: bytes | None,
               value: bytes | None) -> int:
        log = self.logs.setdefault((topic, partition), [])
        log.append(Entry(key, value, "open"))
        return len(log) - 1

    def end(self, state: str) -> None:
        """Commit or abort everything open; one marker per partition touched."""
        for log in self.logs.values():
            if any(e.state == "open" for e in log):
                for e in log:
                    if e.state == "open":
                        e.state = state
                log.append(Entry(None, None, "marker"))

    def read_committed(self, topic: str, partition: int) -> list[bytes | None]:
        return [e.value for e in self.logs.get((topic, partition), [])
                if e.state == "committed"]

    def committed_progress(self) -> dict[tuple[str, int], int]:
        found: dict[tuple[str, int], int] = {}
        for (topic, _), log in self.logs.items():
            if topic != PROGRESS:
                continue
            for e in log:
                progress = decode_source_progress(e.key, e.value) if e.state == "committed" \
                    else None
                if progress is not None and progress.last_offset is not None:
                    found[(progress.topic, progress.partition)] = progress.last_offset + 1
        return found


class AllPartitions:
    """A producer's client and metadata that know every partition (the stand-in writes
    wherever it is told)."""

    def __init__(self) -> None:
        self.cluster = self

    def partitions_for_topic(self, topic: str) -> range:
        return range(1 << 16)

    async def force_metadata_update(self) -> bool:
        return True


class RecordingProducer:
    """Records calls in `calls`; can fail a send, a commit (landed or not) or be fenced."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.calls: list[tuple[Any, ...]] = []
        self.fail_batches = 0
        self.commit_error: BaseException | None = None
        self.commit_lands = False
        self.fenced_at: str | None = None
        self.client = AllPartitions()

    def create_batch(self) -> Batch:
        return Batch()

    def _fence(self, where: str) -> None:
        if self.fenced_at == where:
            raise ProducerFenced()

    async def begin_transaction(self) -> None:
        self._fence("begin")
        self.calls.append(("begin",))

    async def send_batch(self, batch: Batch, topic: str, *, partition: int
                         ) -> asyncio.Future[Meta]:
        future: asyncio.Future[Meta] = asyncio.get_running_loop().create_future()
        self.calls.append(("batch", topic, partition, [v for _, v in batch.records]))
        if self.fail_batches:
            self.fail_batches -= 1
            future.set_exception(KafkaConnectionError("broker went away"))
            return future
        base = None
        for key, value in batch.records:
            offset = self.target.append(topic, partition, key, value)
            base = offset if base is None else base
        assert base is not None
        future.set_result(Meta(base))
        return future

    async def send(self, topic: str, *, key: bytes | None, value: bytes,
                   partition: int | None) -> asyncio.Future[Meta]:
        self.calls.append(("send", topic, key, value))
        future: asyncio.Future[Meta] = asyncio.get_running_loop().create_future()
        future.set_result(Meta(self.target.append(topic, partition or 0, key, value)))
        return future

    async def commit_transaction(self) -> None:
        self._fence("commit")
        self.calls.append(("commit",))
        if self.commit_error is not None:
            if self.commit_lands:
                self.target.end("committed")
            raise self.commit_error
        self.target.end("committed")

    async def abort_transaction(self) -> None:
        self.calls.append(("abort",))
        self.target.end("aborted")


class Harness:
    def __init__(self, *, books: RoundBooks | None = None, partitions: int = 2) -> None:
        self.target = Target()
        self.producer = RecordingProducer(self.target)
        self.producers = [self.producer]
        self.acks: list[tuple[int, list[int], int]] = []
        self.fenced: list[str] = []
        self.pumps = {TopicPartition("orders", p): PartitionPump(
            flow="primary->backup", source_topic="orders", target_topic="primary.orders",
            partition=p, next_offset=0, backoff=Backoff(initial=0.0, maximum=0.0, jitter=0.0))
            for p in range(partitions)}
        for pump in self.pumps.values():
            pump.transactional = True
        self.books = books or RoundBooks(SOURCE, MAP)
        self.loop = TransactionalDelivery(
            self.producer, self.pumps, fetch=self._fetch, on_ack=self._ack, books=self.books,
            recover=self._recover, committed=self._committed, on_fenced=self.fenced.append)

    async def _fetch(self, timeout_ms: int) -> None:
        return None

    def _ack(self, pump: PartitionPump, delivered: Delivered) -> None:
        self.acks.append((pump.partition, list(delivered.shipment.offsets()),
                          delivered.base_offset))

    async def _recover(self, failed: Any) -> RecordingProducer:
        # What InitProducerId with the same transactional id does: the open transaction
        # of the previous producer ends (here: is aborted) before the new one writes.
        self.target.end("aborted")
        self.producer = RecordingProducer(self.target)
        self.producers.append(self.producer)
        return self.producer

    async def _committed(self, partitions: Collection[TopicPartition]
                         ) -> Mapping[tuple[str, int], int]:
        progress = self.target.committed_progress()
        return {k: v for k, v in progress.items()
                if TopicPartition(*k) in set(partitions)}

    def offer(self, partition: int, first: int, count: int) -> None:
        self.pumps[TopicPartition("orders", partition)].offer(
            [Rec(o, f"p{partition}-{o}".encode(), partition=partition)  # type: ignore[misc]
             for o in range(first, first + count)])

    def pump(self, partition: int) -> PartitionPump:
        return self.pumps[TopicPartition("orders", partition)]

    def copies(self, partition: int) -> list[bytes | None]:
        return self.target.read_committed("primary.orders", partition)


def expected(partition: int, first: int, count: int) -> list[bytes | None]:
    return [f"p{partition}-{o}".encode() for o in range(first, first + count)]


async def test_a_round_sends_every_batch_then_their_bookkeeping_then_commits() -> None:
    h = Harness()
    h.offer(0, 0, 3)
    h.offer(1, 0, 2)
    await h.loop.round()
    kinds = [c[0] for c in h.producer.calls]
    assert kinds == ["begin", "batch", "batch", "send", "send", "send", "send", "commit"]
    sends = [c for c in h.producer.calls if c[0] == "send"]
    assert [c[1] for c in sends] == [PROGRESS, MAP, PROGRESS, MAP]
    # Progress names the last record copied of each partition, MM2's format.
    assert h.target.committed_progress() == {("orders", 0): 3, ("orders", 1): 2}
    runs = offset_map_pb2.OffsetMapRecord.FromString(sends[1][3]).runs
    assert [(r.upstream_start, r.count, r.downstream_start) for r in runs] == [(0, 3, 0)]
    assert h.copies(0) == expected(0, 0, 3) and h.copies(1) == expected(1, 0, 2)
    assert h.pump(0).next_offset == 3 and h.pump(1).next_offset == 2
    assert sorted(h.acks) == [(0, [0, 1, 2], 0), (1, [0, 1], 0)]


async def test_a_failed_send_aborts_the_round_and_resends_it_from_the_committed_progress(
) -> None:
    h = Harness()
    h.offer(0, 0, 3)
    h.offer(1, 0, 3)
    await h.loop.round()  # committed: offsets 0..2 of both partitions
    h.offer(0, 3, 2)
    h.offer(1, 3, 2)
    first = h.producer
    first.fail_batches = 1
    await h.loop.round()
    assert [c[0] for c in first.calls[-4:]] == ["begin", "batch", "batch", "abort"]
    assert ("commit",) not in first.calls[8:]
    # Nothing of the aborted round is visible, and progress did not move.
    assert h.copies(0) == expected(0, 0, 3) and h.copies(1) == expected(1, 0, 3)
    assert h.target.committed_progress() == {("orders", 0): 3, ("orders", 1): 3}
    assert h.pump(0).next_offset == 3 and h.pump(0).error is not None
    assert len(h.producers) == 2 and h.loop.producer is h.producers[1]
    assert h.loop.rounds_aborted == 1
    await h.loop.round()  # the same records again, in a new transaction
    assert [c[0] for c in h.producer.calls][-1] == "commit"
    assert h.copies(0) == expected(0, 0, 5) and h.copies(1) == expected(1, 0, 5)
    assert h.target.committed_progress() == {("orders", 0): 5, ("orders", 1): 5}
    assert h.pump(0).error is None


async def test_a_commit_that_failed_but_landed_is_not_sent_again() -> None:
    h = Harness(partitions=1)
    h.offer(0, 0, 4)
    h.producer.commit_error = KafkaTimeoutError()
    h.producer.commit_lands = True
    await h.loop.round()
    # The outcome was unknown to the client; the committed progress shows it landed.
    assert h.pump(0).next_offset == 4
    assert h.acks == [(0, [0, 1, 2, 3], 0)]
    h.offer(0, 4, 2)
    await h.loop.round()
    assert h.copies(0) == expected(0, 0, 6)


async def test_a_commit_that_failed_and_did_not_land_is_sent_again() -> None:
    h = Harness(partitions=1)
    h.offer(0, 0, 4)
    h.producer.commit_error = KafkaTimeoutError()
    await h.loop.round()
    assert h.pump(0).next_offset == 0 and not h.acks
    assert h.copies(0) == []
    await h.loop.round()
    assert h.copies(0) == expected(0, 0, 4)
    # Aborted copies and markers take offsets: the committed batch landed after them.
    assert h.acks == [(0, [0, 1, 2, 3], 5)]


async def test_fencing_stops_every_partition_without_resending() -> None:
    h = Harness()
    h.offer(0, 0, 3)
    h.offer(1, 0, 3)
    h.producer.fenced_at = "commit"
    await h.loop.round()
    assert len(h.fenced) == 1 and "fenced" in h.fenced[0]
    assert h.loop.producer is None and len(h.producers) == 1  # no new producer
    for p in (0, 1):
        assert h.pump(p).state is PumpState.STOPPED
        assert not h.pump(p).in_flight and h.pump(p).next_offset == 0
        assert h.pump(p).error is not None and "fenced" in h.pump(p).error
    assert ("abort",) not in h.producer.calls
    await h.loop.run()  # returns at once: a fenced loop sends nothing more
    assert h.copies(0) == [] and h.target.committed_progress() == {}


def sync_books() -> RoundBooks:
    return RoundBooks(SOURCE, MAP, planner=OffsetSyncPlanner(100), syncs_topic=SYNCS)


async def test_offset_syncs_on_the_target_commit_in_the_same_transaction() -> None:
    h = Harness(books=sync_books(), partitions=1)
    h.offer(0, 0, 3)
    await h.loop.round()
    kinds = [(c[0], c[1] if c[0] == "send" else None) for c in h.producer.calls]
    assert kinds.index(("send", SYNCS)) < kinds.index(("commit", None))
    syncs = [OffsetSync.decode(e.key, e.value) for e in h.target.logs[(SYNCS, 0)]
             if e.state == "committed"]
    assert syncs and syncs[-1].upstream_offset == 2 and syncs[-1].downstream_offset == 2


async def test_offset_syncs_of_an_aborted_round_are_never_visible_and_are_planned_again(
) -> None:
    h = Harness(books=sync_books(), partitions=1)
    h.offer(0, 0, 3)
    h.producer.fail_batches = 1
    await h.loop.round()
    assert not [e for e in h.target.logs.get((SYNCS, 0), []) if e.state == "committed"]
    await h.loop.round()
    syncs = [OffsetSync.decode(e.key, e.value) for e in h.target.logs[(SYNCS, 0)]
             if e.state == "committed"]
    # The first committed sync maps upstream 0 to where the record really is now.
    assert syncs[0].upstream_offset == 0
    assert syncs[0].downstream_offset == h.acks[0][2]


async def test_offset_syncs_on_the_source_stay_out_of_the_target_transaction() -> None:
    h = Harness(partitions=1)  # the flow plans and writes them after the commit
    h.offer(0, 0, 3)
    await h.loop.round()
    assert not [c for c in h.producer.calls if c[0] == "send" and c[1] == SYNCS]


async def test_a_stop_waits_for_the_round_under_way() -> None:
    h = Harness(partitions=1)
    h.offer(0, 0, 3)
    gate = asyncio.Event()
    begin = h.producer.begin_transaction

    async def slow_begin() -> None:
        await gate.wait()
        await begin()

    h.producer.begin_transaction = slow_begin  # type: ignore[method-assign]
    task = asyncio.create_task(h.loop.run())
    while h.loop._round is None:  # noqa: ASYNC110 - the loop is plain state here
        await asyncio.sleep(0)
    drained = asyncio.create_task(h.loop.drain(5.0))
    await asyncio.sleep(0)
    assert not drained.done()
    gate.set()
    assert await drained
    await task
    assert h.copies(0) == expected(0, 0, 3) and h.pump(0).next_offset == 3


def test_the_transactional_id_is_stable_per_deployment_flow_and_owner() -> None:
    a = transactional_id("prod", "primary->backup", "standalone")
    assert a == transactional_id("prod", "primary->backup", "standalone")
    assert a != transactional_id("test", "primary->backup", "standalone")
    assert a != transactional_id("prod", "backup->primary", "standalone")
    assert a != transactional_id("prod", "primary->backup", "worker-2")
    assert transactional_id(None, "a->b", "w") == "mirrorline-default-a->b-w"


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The probe's answer (mocked: no broker here starts an aiokafka transactional
    producer); the list holds what it returns."""
    answer: list[str | None] = [None]

    async def fake(kwargs: Mapping[str, Any], **_: Any) -> str | None:
        return answer[0]

    monkeypatch.setattr("mirrorline.replicator.exactly_once.transactions_unavailable", fake)
    return answer


async def test_transactions_are_used_where_the_probe_succeeds(probe: list[str | None]) -> None:
    from mirrorline.core.config import parse_config
    from mirrorline.core.errors import ConfigError
    from mirrorline.replicator.exactly_once import check_exactly_once

    base = ("clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
            "a->b.enabled = true\n")
    for extra in ("exactly.once.support = required\n", "exactly.once.support = requested\n",
                  "b.exactly.once.source.support = enabled\n"):
        settings = parse_config(base + extra)
        assert await check_exactly_once(settings.flows["a->b"], settings.raw) is True
    settings = parse_config(base)
    assert await check_exactly_once(settings.flows["a->b"], settings.raw) is False
    probe[0] = "UnsupportedVersionError: InitProducerId"
    settings = parse_config(base + "exactly.once.support = requested\n")
    assert await check_exactly_once(settings.flows["a->b"], settings.raw) is False
    settings = parse_config(base + "b.exactly.once.source.support = enabled\n")
    with pytest.raises(ConfigError, match=r"b\.exactly\.once\.source\.support"):
        await check_exactly_once(settings.flows["a->b"], settings.raw)


async def started(h: Harness, call: str) -> None:
    while not any(c[0] == call for c in h.producer.calls):  # noqa: ASYNC110 - plain state
        await asyncio.sleep(0)


async def test_a_commit_hanging_when_the_producer_is_aborted_stops_the_partition() -> None:
    """Stopping (or a worker losing its lease) aborts the producer while a commit waits
    for an unreachable coordinator: whether it landed is unknown, so the partition sends
    nothing more and its next owner resumes from the committed progress."""
    h = Harness(partitions=1)
    h.offer(0, 0, 3)
    never = asyncio.Event()
    commit = h.producer.commit_transaction

    async def hanging_commit() -> None:
        h.producer.calls.append(("commit",))
        await never.wait()
        await commit()

    h.producer.commit_transaction = hanging_commit  # type: ignore[method-assign]
    task = asyncio.create_task(h.loop.run())
    await started(h, "commit")
    h.loop.producer = None  # what `abort_sends` does before aborting the producer
    await asyncio.wait_for(h.loop.settle_all(), 5)
    pump = h.pump(0)
    assert pump.state is PumpState.STOPPED and not pump.in_flight
    assert pump.error is not None and "outcome unknown" in pump.error
    assert pump.next_offset == 0 and not h.acks
    assert len(h.producers) == 1  # the flow opens the next producer, not the round
    assert await h.loop.drain(5)
    await asyncio.wait_for(task, 5)


async def test_sends_failing_because_the_producer_was_aborted_are_sent_again_later() -> None:
    """The round's sends failed, so nothing can have committed: the records go again with
    the flow's next producer."""
    h = Harness(partitions=1)
    h.offer(0, 0, 3)
    h.producer.fail_batches = 1  # as `abort_producer` fails every queued batch
    original = h.producer

    async def abort_while_sending(batch: Batch, topic: str, *, partition: int
                                  ) -> asyncio.Future[Meta]:
        h.loop.producer = None
        return await RecordingProducer.send_batch(original, batch, topic,
                                                  partition=partition)

    original.send_batch = abort_while_sending  # type: ignore[method-assign]
    await h.loop.round()
    pump = h.pump(0)
    assert pump.state is PumpState.RUNNING and not pump.in_flight and pump.next_offset == 0
    assert len(h.producers) == 1 and ("abort",) not in original.calls
    h.loop.producer = await h._recover(original)  # the flow's new producer
    await h.loop.round()
    assert h.copies(0) == expected(0, 0, 3)


async def test_a_stop_while_the_target_cannot_be_reached_after_a_failure_ends_promptly(
) -> None:
    """A failed round waits for a new producer while the target does not answer; a stop
    must not wait for it (every service stops within seconds of SIGTERM)."""
    h = Harness(partitions=1)
    h.offer(0, 0, 3)
    h.producer.fail_batches = 1
    unreachable = asyncio.Event()

    async def never_recovers(failed: Any) -> RecordingProducer:
        unreachable.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    h.loop._recover = never_recovers
    task = asyncio.create_task(h.loop.run())
    await asyncio.wait_for(unreachable.wait(), 5)
    assert await asyncio.wait_for(h.loop.drain(0.05), 5)
    await asyncio.wait_for(task, 5)
    assert h.copies(0) == [] and h.pump(0).next_offset == 0


async def test_source_gaps_give_one_offset_map_run_per_stretch_in_the_transaction() -> None:
    """Compaction or transaction markers upstream: the map says where each record is."""
    h = Harness(partitions=1)
    h.pump(0).offer([Rec(o, f"p0-{o}".encode()) for o in (0, 1, 5, 6, 7)])  # type: ignore[misc]
    await h.loop.round()
    value = next(e.value for e in h.target.logs[(MAP, 0)] if e.state == "committed")
    assert value is not None
    runs = offset_map_pb2.OffsetMapRecord.FromString(value).runs
    assert [(r.upstream_start, r.count, r.downstream_start) for r in runs] == [
        (0, 2, 0), (5, 3, 2)]
    assert h.target.committed_progress() == {("orders", 0): 8}


class Recorder:
    """Stands in for a bookkeeping writer: remembers what reached it."""

    def __init__(self, topic: str = "t") -> None:
        self.topic = topic
        self.calls: list[tuple[Any, ...]] = []

    def save(self, *args: Any) -> None:
        self.calls.append(("save", *args))

    def acknowledged(self, *args: Any, covered_from: int = -1) -> None:
        self.calls.append(("map", *args))

    def wake(self) -> None:
        self.calls.append(("wake",))


def test_after_a_commit_the_shared_bookkeeping_writes_only_what_the_transaction_could_not(
) -> None:
    """The writers are stand-ins (they would need a broker): what matters is which of them
    an acknowledgement reaches. Exactly-once mode: progress and map runs were committed
    with the records; offset syncs on the source are planned and sent after the commit;
    with syncs on the target (no sender left) nothing more is written."""
    from mirrorline.kafka.acked import FlowBookkeeping

    progress, map_writer, sender = Recorder(), Recorder(), Recorder(SYNCS)
    planner = OffsetSyncPlanner(100)
    books = FlowBookkeeping(progress, map_writer, planner, sender,  # type: ignore[arg-type]
                            committed_with_records=True)
    books.acknowledged("orders", 0, [0, 1, 2], 10)
    assert progress.calls == [] and map_writer.calls == []
    assert sender.calls == [("wake",)] and planner.pending_count == 1
    books.sync_sender = None
    books.acknowledged("orders", 0, [3, 4], 14)
    assert progress.calls == [] and map_writer.calls == [] and planner.pending_count == 1
    at_least_once = FlowBookkeeping(progress, map_writer, None, None)  # type: ignore[arg-type]
    at_least_once.acknowledged("orders", 1, [0, 1], 0)
    assert progress.calls == [("save", "orders", 1, 2)]
    assert map_writer.calls == [("map", "orders", 1, [0, 1], 0)]
