"""A target behind a TCP proxy (`proxy.KafkaProxy`) that goes silent or answers slowly.

Silent mid-copy: an idempotent aiokafka producer never expires a batch whose partition
leader it still knows: during a target outage it retries the batch unseen for as long as
the outage lasts. The replicator watches its batches instead (`DeliveryLoop`'s
`stall_after_s`): one unacknowledged past `request.timeout.ms` aborts the sends, a new
producer takes over, and the partition says the target failed it and checks the target
before sending again.

Slow to acknowledge: the replicator's producer keeps several produce requests in flight
per broker connection (`max.in.flight.requests.per.connection`, default 5), several
batches of one partition among them, and a failure in the middle of them loses and
repeats nothing. The proxy counts the produce requests outstanding on each connection and
holds the data producer's produce responses: held, a producer that pipelines sends more
while it waits; one that does not waits.

The target is a real Apache Kafka broker (one for the module) reached only through the
proxy (the broker advertises the proxy's port). Silencing the proxy is how the broker goes
quiet: connections stay open and nothing comes back, as from a broker that hangs or a
network that drops everything. Nothing is mocked; the proxy only forwards bytes, holds
them or cuts the connections. Unlike a SIGSTOPped broker, a silent proxy is ended by the
test at will (every held connection is closed), so teardown never waits on a frozen
process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from helpers import Record, consume_all, create_topic, produce, wait_for
from procs import ServiceProcess, mm2_config, replicator
from proxy import LOOPBACK, KafkaProxy, proxied_kafka

from mirrorline.dev.brokers import LocalBroker

pytestmark = [pytest.mark.integration, pytest.mark.kafka_only]


@pytest.fixture(scope="module")
async def target(tmp_path_factory: pytest.TempPathFactory
                 ) -> AsyncIterator[tuple[KafkaProxy, str]]:
    """One proxied Apache Kafka target for this module's tests (the proxy and the broker's
    own bootstrap); each test leaves the proxy forwarding again."""
    async with proxied_kafka(tmp_path_factory.mktemp("proxied") / "kafka") as proxied:
        yield proxied


@pytest.fixture
async def fresh(target: tuple[KafkaProxy, str]) -> AsyncIterator[tuple[KafkaProxy, str]]:
    proxy = target[0]
    proxy.forget()
    try:
        yield target
    finally:
        proxy.speak()
        proxy.release()


async def test_a_silent_target_is_checked_after_the_request_timeout_and_copied_once(
        primary: LocalBroker, unique: str, tmp_path: Path,
        fresh: tuple[KafkaProxy, str]) -> None:
    topic, remote = f"{unique}-silent", f"primary.{unique}-silent"
    await create_topic(primary.bootstrap, topic)
    proxy, direct = fresh
    # Batches are watched for request.timeout.ms: 2 s here, for a short wait.
    config = mm2_config(
        {"primary": primary, "silent": f"{LOOPBACK}:{proxy.port}"},
        {"primary->silent": {"topics": topic, "refresh.topics.interval.seconds": "2"}},
        silent_producer_request_timeout_ms="2000")
    async with replicator(config, tmp_path, name="silent") as proc:
        try:
            await produce(primary.bootstrap, topic, [Record(b"first", key=b"1")])
            # Copied once: the producer knows the remote partition's leader, the
            # case in which aiokafka would retry a batch unseen for good.
            await consume_all(direct, remote, expected=1)

            # ... and acknowledged: a record on the target whose acknowledgement is
            # still on its way would be sent again unchecked once silenced.
            async def acknowledged() -> bool:
                status = await proc.replicator_status()
                return any(p.next_offset >= 1 for p in status.partitions
                           if p.source_topic == topic)
            await wait_for(acknowledged, 30, "the first record was never acknowledged")

            proxy.go_silent()
            await produce(primary.bootstrap, topic, [Record(b"second", key=b"2")])

            said = ""

            async def told() -> bool:
                nonlocal said
                status = await proc.replicator_status()
                said = " | ".join(p.error for p in status.partitions if p.error)
                return "acknowledged no batch" in said and "checking the target" in said
            await wait_for(told, 30, "no partition said the silent target acknowledged "
                           "nothing and that it checks the target")
            assert "request.timeout.ms" in said, said
            assert "cancelling 1 batches in flight: the target acknowledged no batch" \
                in proc.log_path.read_text()
        finally:
            proxy.speak()

        # Back: the partition finds the first record on the target, none of the
        # second (it never passed the proxy), and sends that one again, once.
        copied = await consume_all(direct, remote, expected=2, timeout=60)
        assert [(r.key, r.value) for r in copied[0]] == [
            (b"1", b"first"), (b"2", b"second")], copied


#: The flow's data producer's client id ends so (its bookkeeping producer's does not).
DATA_PRODUCER = "|producer"
BATCHES = 24


async def copied_up_to(proc: ServiceProcess, topic: str, count: int) -> None:
    async def done() -> bool:
        status = await proc.replicator_status()
        return any(p.next_offset >= count for p in status.partitions if p.source_topic == topic)
    await wait_for(done, 60, f"{topic}: {count} records never acknowledged")


def config(primary: LocalBroker, proxy: KafkaProxy, topic: str, **producer: str) -> str:
    return mm2_config(
        {"primary": primary, "proxied": f"{LOOPBACK}:{proxy.port}"},
        {"primary->proxied": {"topics": topic, "refresh.topics.interval.seconds": "2",
                              "mirrorline.batch.path": "on"}},
        **{f"proxied_producer_{key}": value for key, value in producer.items()})


async def test_batches_travel_pipelined_by_default_and_one_at_a_time_when_set_to_one(
        primary: LocalBroker, unique: str, tmp_path: Path,
        fresh: tuple[KafkaProxy, str]) -> None:
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
    proxy, direct = fresh
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
