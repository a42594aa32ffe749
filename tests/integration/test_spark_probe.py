"""The Spark source's log-end probe (`mirrorline_spark.probe.EndProbe`) on a real broker.

No Spark here: the probe is what the source's `latestOffset` asks on the driver before
every micro-batch, a plain confluent-kafka consumer. Where a test needs the answer to come
from a fetch response that arrived after the question, it raises the probe's upper bound
(`PROBE_S`, 0.25 s) to 10 s: on a loaded two-core machine a fetch round trip can take
longer than 0.25 s, and the assertion is about what the probe answers, not how fast (the
speed is measured by `python -m bench.probe`). A probe that waited out its bound instead
of answering on fresh responses would still pass but take 10 s per call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from helpers import Record, create_topic, produce, wait_for
from mirrorline_spark import probe as probe_module
from mirrorline_spark.probe import EndProbe

from mirrorline.dev.brokers import LocalBroker

pytestmark = pytest.mark.integration

Ends = dict[tuple[str, int], int]


@pytest.fixture(params=["read_uncommitted", "read_committed"])
def end_probe(primary: LocalBroker, request: pytest.FixtureRequest) -> Iterator[EndProbe]:
    """Both ways of reading transactions: without any, the ends are the same."""
    probe = EndProbe({"bootstrap.servers": primary.bootstrap,
                      "isolation.level": request.param})
    try:
        yield probe
    finally:
        probe.close()


async def _ends(probe: EndProbe, positions: Ends) -> Ends:
    return await asyncio.to_thread(probe.ends, dict(positions))


async def _write(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    await produce(bootstrap, topic, [Record(b"v%d" % i, partition=p)
                                     for p, n in counts.items() for i in range(n)])


async def test_the_probe_reports_each_partitions_end_as_soon_as_records_are_written(
    primary: LocalBroker, unique: str, end_probe: EndProbe, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(probe_module, "PROBE_S", 10.0)
    orders, audit = f"{unique}-orders", f"{unique}-audit"
    await create_topic(primary.bootstrap, orders, partitions=3)
    await create_topic(primary.bootstrap, audit, partitions=1)
    await _write(primary.bootstrap, orders, {0: 7, 1: 3})  # partition 2 stays empty
    await _write(primary.bootstrap, audit, {0: 5})
    start = {(orders, 0): 0, (orders, 1): 0, (orders, 2): 0, (audit, 0): 0}

    first = await _ends(end_probe, start)
    assert first == {(orders, 0): 7, (orders, 1): 3, (orders, 2): 0, (audit, 0): 5}

    # Growth, as the next micro-batch asks: from where the previous one ended.
    await _write(primary.bootstrap, orders, {1: 4, 2: 2})
    await _write(primary.bootstrap, audit, {0: 1})
    grown = await _ends(end_probe, first)
    assert grown == {(orders, 0): 7, (orders, 1): 7, (orders, 2): 2, (audit, 0): 6}

    # Nothing new: the same ends, also when asked from the log start again.
    assert await _ends(end_probe, grown) == grown
    assert await _ends(end_probe, start) == grown

    # Only the partitions asked about are answered (one query's share of the cluster).
    await _write(primary.bootstrap, orders, {0: 2})
    assert await _ends(end_probe, {(orders, 0): 7, (audit, 0): 6}) == {
        (orders, 0): 9, (audit, 0): 6}


async def test_positions_beyond_the_data_get_the_true_end_then_its_growth(
    primary: LocalBroker, unique: str, end_probe: EndProbe, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A source position past the log end (the source cluster lost records, e.g. a broker
    restarted on empty storage) is answered with the true, lower end -- never with the
    position, which would make the source plan records that do not exist. Apache Kafka
    answers such a fetch with OFFSET_OUT_OF_RANGE (the probe restarts at the log start);
    Tansu holds it and answers empty with the high watermark, so here the first answer
    comes when the probe's bound runs out."""
    topic = f"{unique}-lost"
    await create_topic(primary.bootstrap, topic, partitions=2)
    await _write(primary.bootstrap, topic, {0: 5})
    beyond = {(topic, 0): 50, (topic, 1): 9}
    answers: list[Ends] = []

    async def answered() -> bool:
        answers.append(await _ends(end_probe, beyond))
        return len(answers[-1]) == 2

    await wait_for(answered, 30, "the probe never answered for positions past the log end")
    assert all(set(a.items()) <= {((topic, 0), 5), ((topic, 1), 0)} for a in answers), answers

    # The known end is where the probe fetches from now: growth past the old position
    # comes from fresh responses like any other.
    monkeypatch.setattr(probe_module, "PROBE_S", 10.0)
    await _write(primary.bootstrap, topic, {0: 50, 1: 1})
    assert await _ends(end_probe, beyond) == {(topic, 0): 55, (topic, 1): 1}


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
async def test_an_open_transaction_ends_what_a_committed_read_can_plan(
    primary: LocalBroker, unique: str, monkeypatch: pytest.MonkeyPatch, isolation: str,
) -> None:
    """Read committed, a micro-batch planned past the last stable offset would wait for
    the transaction to end: the end is that offset until it commits. Read uncommitted
    (the workers' and the Java client's default), the open transaction's records are
    readable and the end is the high watermark."""
    from confluent_kafka import Producer
    from mirrorline_spark.batchread import FeedClient, RangeReader, run_down
    from mirrorline_spark.options import SourceFeed
    from mirrorline_spark.source import KafkaRange, read_range

    monkeypatch.setattr(probe_module, "PROBE_S", 10.0)
    topic = f"{unique}-txn"
    await create_topic(primary.bootstrap, topic, partitions=1)
    await _write(primary.bootstrap, topic, {0: 5})
    kafka = {"bootstrap.servers": primary.bootstrap, "isolation.level": isolation}
    txn = Producer({"bootstrap.servers": primary.bootstrap,
                    "transactional.id": f"{unique}-txn"})
    await asyncio.to_thread(txn.init_transactions, 30)
    txn.begin_transaction()
    for i in range(3):
        txn.produce(topic, b"t%d" % i, partition=0)
    await asyncio.to_thread(txn.flush, 30)
    await _write(primary.bootstrap, topic, {0: 1})  # after the open transaction: offset 8
    probe = EndProbe(kafka)
    try:
        end = (await _ends(probe, {(topic, 0): 0}))[(topic, 0)]
        assert end == (5 if isolation == "read_committed" else 9)
        # What was planned is read to its end at once, open transaction or not, on the
        # record path and on the batch path.
        batches = await asyncio.to_thread(
            lambda: list(read_range(kafka, KafkaRange(0, topic, 0, 0, end))))
        assert sum(b.num_rows for b in batches) == end
        feed = SourceFeed(kafka, {}, batch_path="on", client={
            "bootstrap.servers": primary.bootstrap, "isolation.level": isolation})

        def read_raw(stop: int) -> int:
            loop = asyncio.new_event_loop()
            client = FeedClient(feed)
            reader = RangeReader(feed, client, topic, 0, 0, stop, stall_s=30.0)

            async def count() -> int:
                return sum([len(r.records) if r.records is not None
                            else r.batch.header.record_count  # type: ignore[union-attr]
                            async for routed in reader.routes() for r in routed.batches])
            try:
                return loop.run_until_complete(count())
            finally:
                run_down(loop, client.aclose)
        assert await asyncio.to_thread(read_raw, end) == end
        await asyncio.to_thread(txn.commit_transaction, 30)

        async def committed() -> bool:  # the commit marker follows the records: 9
            return (await _ends(probe, {(topic, 0): end}))[(topic, 0)] >= 9
        await wait_for(committed, 30, "the end did not move past the committed transaction")
        # Past the marker, both isolations read the same 9 records, and the read ends.
        assert await asyncio.to_thread(read_raw, 10) == 9
    finally:
        probe.close()
