"""A target that goes silent mid-copy: the replicator says so and checks it, on cue.

An idempotent aiokafka producer never expires a batch whose partition leader it still
knows: during a target outage it retries the batch unseen for as long as the outage lasts.
The replicator watches its batches instead (`DeliveryLoop`'s `stall_after_s`): one
unacknowledged past `request.timeout.ms` aborts the sends, a new producer takes over, and
the partition says the target failed it and checks the target before sending again.

The target here is a real Apache Kafka broker reached only through a TCP proxy this test
controls (`proxy.KafkaProxy`; the broker advertises the proxy's port). Silencing the proxy
is how the broker goes quiet: connections stay open and nothing comes back, as from a
broker that hangs or a network that drops everything. Nothing is mocked; the proxy only
forwards bytes or holds them. Unlike a SIGSTOPped broker, a silent proxy is ended by the
test at will (every held connection is closed), so teardown never waits on a frozen
process.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import Record, consume_all, create_topic, produce, wait_for
from procs import mm2_config, replicator
from proxy import LOOPBACK, proxied_kafka

from mirrorline.dev.brokers import LocalBroker

pytestmark = [pytest.mark.integration, pytest.mark.kafka_only]

async def test_a_silent_target_is_checked_after_the_request_timeout_and_copied_once(
        primary: LocalBroker, unique: str, tmp_path: Path) -> None:
    topic, remote = f"{unique}-silent", f"primary.{unique}-silent"
    await create_topic(primary.bootstrap, topic)
    async with proxied_kafka(tmp_path / "kafka") as (proxy, direct):
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
