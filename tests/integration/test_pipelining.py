"""The replicator's producer keeps several produce requests in flight per broker
connection (`max.in.flight.requests.per.connection`, default 5), several batches of one
partition among them, and a failure in the middle of them loses and repeats nothing.

The target is a real Apache Kafka broker behind a TCP proxy (`proxy.KafkaProxy`) that
counts the produce requests outstanding on each connection and holds the data producer's
produce responses: held, a producer that pipelines sends more while it waits; one that
does not waits. Nothing is mocked; the proxy only forwards bytes, holds them or cuts the
connections.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import Record, consume_all, create_topic, produce, wait_for
from procs import ServiceProcess, mm2_config, replicator
from proxy import LOOPBACK, KafkaProxy, proxied_kafka

from mirrorline.dev.brokers import LocalBroker

pytestmark = [pytest.mark.integration, pytest.mark.kafka_only]

#: The flow's data producer's client id ends so (its bookkeeping producer's does not).
DATA_PRODUCER = "|producer"
BATCHES = 24


async def copied_up_to(proc: ServiceProcess, topic: str, count: int) -> None:
    async def done() -> bool:
        status = await proc.replicator_status()
        return any(p.next_offset >= count for p in status.partitions if p.source_topic == topic)
    await wait_for(done, 60, f"{topic}: {count} records never acknowledged")


def config(primary: LocalBroker, proxy: KafkaProxy, topic: str, **target: str) -> str:
    return mm2_config(
        {"primary": primary, "proxied": f"{LOOPBACK}:{proxy.port}"},
        {"primary->proxied": {"topics": topic, "refresh.topics.interval.seconds": "2",
                              "mirrorline.batch.path": "on"}},
        **{f"proxied_producer_{key}": value for key, value in target.items()})


async def test_batches_travel_pipelined_by_default_and_one_at_a_time_when_set_to_one(
        primary: LocalBroker, unique: str, tmp_path: Path) -> None:
    """By default the data producer has several produce requests of one partition
    outstanding on its connection; a connection cut under them (the broker wrote them,
    their answers are lost) costs nothing: they are sent again in order and every record
    arrives once. Then a batch the remote topic refuses (too large for its
    max.message.bytes) with batches after it in flight: it is re-batched, the ones after
    it are refused as out of order and sent again after it, still once each, in order.
    With `max.in.flight.requests.per.connection = 1` it never has more than one."""
    piped, single = f"{unique}-piped", f"{unique}-single"
    for topic in (piped, single):
        await create_topic(primary.bootstrap, topic)
        # One record per source batch, copied as they are: BATCHES batches to send.
        await produce(primary.bootstrap, topic,
                      [Record(b"%d" % i, key=b"k") for i in range(BATCHES)], one_per_batch=True)
    # ... then one batch of 40 records (about 3 KB) and more one-record batches.
    large = [Record(b"%d" % i + b"." * 60, key=b"k") for i in range(BATCHES, BATCHES + 40)]
    await produce(primary.bootstrap, piped, large, linger_ms=1000)
    after = [Record(b"%d" % i, key=b"k") for i in range(BATCHES + 40, BATCHES + 48)]
    await produce(primary.bootstrap, piped, after, one_per_batch=True)
    expected = [b"%d" % i for i in range(BATCHES)] + [r.value for r in large] + \
        [r.value for r in after]
    async with proxied_kafka(tmp_path / "kafka") as (proxy, direct):
        # The remote topic takes batches of at most 2 KB: the large one is refused as it is.
        await create_topic(direct, f"primary.{piped}", configs={"max.message.bytes": "2048"})
        # Past its first (a partition pipelines once the broker holds a batch of the
        # producer), no acknowledgement reaches the data producer.
        proxy.hold(DATA_PRODUCER, after=1)
        async with replicator(config(primary, proxy, piped), tmp_path, name="piped") as proc:
            async def pipelined() -> bool:
                return proxy.most_outstanding(DATA_PRODUCER) >= 2
            await wait_for(pipelined, 30, "never more than one produce request outstanding")
            proxy.cut()  # ... and their answers never come
            await copied_up_to(proc, piped, len(expected))
            assert "in sequence order" in proc.log_path.read_text()  # retried, not replaced
        copied = await consume_all(direct, f"primary.{piped}", expected=len(expected))
        assert [r.value for r in copied[0]] == expected

        proxy.forget()
        proxy.hold(DATA_PRODUCER, delay=0.05)  # slow acknowledgements: room to pipeline
        async with replicator(config(primary, proxy, single,
                                     max_in_flight_requests_per_connection="1"),
                              tmp_path, name="single") as proc:
            await copied_up_to(proc, single, BATCHES)
        assert proxy.most_outstanding(DATA_PRODUCER) == 1
        copied = await consume_all(direct, f"primary.{single}", expected=BATCHES)
        assert [r.value for r in copied[0]] == [b"%d" % i for i in range(BATCHES)], copied
