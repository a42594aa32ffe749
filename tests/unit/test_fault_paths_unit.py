"""Pure pieces of the fault paths: bad-record reporting, failure causes, offset-map record
checks, offsets-topic record checks, and client settings checked before anything starts."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from mirrorline.core.bad_records import BadRecords
from mirrorline.core.config import parse_config
from mirrorline.core.errors import ConfigError
from mirrorline.core.offset_map import OffsetMap
from mirrorline.core.progress import encode_offset, progress_problem, source_offset_key
from mirrorline.core.settings import MirrorSettings
from mirrorline.kafka import causes
from mirrorline.kafka.preflight import check_clients
from mirrorline.v1.offset_map_pb2 import OffsetMapRecord


def test_a_bad_record_is_reported_once_with_its_coordinates(
        caplog: pytest.LogCaptureFixture) -> None:
    bad = BadRecords("checkpointer a->b")

    def boom() -> int:
        raise ValueError("count must be >= 0, got -3")

    with caplog.at_level(logging.WARNING):
        assert bad.decode("mirrorline-offset-map.a.internal", 0, 17, boom) is None
        assert bad.decode("mirrorline-offset-map.a.internal", 0, 17, boom) is None  # re-read
        assert bad.decode("mirrorline-offset-map.a.internal", 0, 18, lambda: 5) == 5
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["checkpointer a->b: skipped a bad record at "
                     "mirrorline-offset-map.a.internal-0 offset 17: "
                     "ValueError: count must be >= 0, got -3"]
    assert bad.count == 1


def test_an_impossible_offset_map_record_changes_nothing() -> None:
    offset_map = OffsetMap()
    good = OffsetMapRecord(topic="t", partition=0)
    good.runs.add(upstream_start=0, count=10, downstream_start=0)
    offset_map.add_record(good)
    bad = OffsetMapRecord(topic="t", partition=0)
    bad.runs.add(upstream_start=10, count=5, downstream_start=10)
    bad.runs.add(upstream_start=15, count=-3, downstream_start=15)
    with pytest.raises(ValueError, match="count"):
        offset_map.add_record(bad)
    assert offset_map.mapped_until("t", 0) == 10  # not even the record's first, good run


def test_offsets_topic_records_of_other_connectors_are_not_bad_but_garbage_is() -> None:
    key = source_offset_key("a", "orders", 0)
    assert progress_problem(key, encode_offset(41)) is None
    assert progress_problem(b'["MirrorCheckpointConnector",{"x":1}]', b"{}") is None
    assert progress_problem(b"\xff junk", b"{}") == "the key is not JSON"
    assert progress_problem(key, b'{"offset": "seven"}') is not None
    assert progress_problem(None, b"{}") is not None


@pytest.mark.parametrize(("message", "kind"), [
    ("Unable connect to \"h:1\": [Errno 111] Connect call failed ('h', 1)",
     "connection refused"),
    ("Unable connect to \"h:1\": [SSL: WRONG_VERSION_NUMBER] wrong version number",
     "TLS handshake failed"),
    ("Unable connect to \"h:1\": SaslAuthenticationFailed: Authentication failed",
     "authentication failed"),
    ("Unable connect to \"h:1\": [Errno -2] Name or service not known", "host not found"),
])
def test_the_cause_aiokafka_logged_replaces_its_generic_bootstrap_error(
        message: str, kind: str) -> None:
    causes.quiet_aiokafka()
    logging.getLogger("aiokafka.client").error(message)
    from aiokafka.errors import KafkaConnectionError

    line = causes.explain(KafkaConnectionError("Unable to bootstrap from [('h', 1)]"), "h:1")
    assert line.startswith(f"{kind}: ")
    assert "bootstrap" not in line


def test_a_tls_client_dropped_by_a_plaintext_listener_is_told_a_tls_handshake_failed() -> None:
    """Apache Kafka's plaintext listener reads a TLS ClientHello as an oversized request and
    closes the connection: aiokafka logs the attempt with an empty reason. Before, the
    operator read a bare `Unable connect to "h:1": ` with no kind at all."""
    from aiokafka.errors import KafkaConnectionError

    causes.quiet_aiokafka()
    logging.getLogger("aiokafka.conn").error('Unable connect to "h:3": ')
    line = causes.explain(KafkaConnectionError("Unable to bootstrap from [('h', 3)]"), "h:3",
                          protocol="SSL")
    assert line.startswith("TLS handshake failed: ")
    assert "security.protocol is SSL" in line
    # Without TLS the same drop stays what it is: no kind is made up.
    plain = causes.explain(KafkaConnectionError("Unable to bootstrap from [('h', 3)]"), "h:3",
                           protocol="PLAINTEXT")
    assert not plain.startswith("TLS")


def test_a_cause_for_another_cluster_is_not_borrowed() -> None:
    causes.quiet_aiokafka()
    logging.getLogger("aiokafka.client").error(
        "Unable connect to \"other:9\": [Errno 111] Connect call failed")
    line = causes.explain(TimeoutError(), "mine:1")
    assert line == "timed out"
    assert "other" not in line


def test_an_unreachable_cluster_is_told_in_one_form_naming_it_its_address_and_the_cause(
        ) -> None:
    """The form every service and `dev` command uses (docs/operations.md, "Faults"): a detail that
    names no address gets the cluster's bootstrap servers after it; a command that knows
    only the address names the cluster by it."""
    from aiokafka.errors import KafkaConnectionError, NodeNotReadyError

    causes.quiet_aiokafka()
    assert causes.unreachable("a", TimeoutError(), "h:7", role="source",
                              purpose="for the canary") == \
        "source cluster 'a' unreachable for the canary: timed out (bootstrap servers h:7)"
    logging.getLogger("aiokafka.conn").error(
        'Unable connect to "h:8": [Errno 111] Connect call failed')
    assert causes.unreachable("b", KafkaConnectionError("Unable to bootstrap from [('h', 8)]"),
                              "h:8") == ("cluster 'b' unreachable: connection refused: Unable "
                                         "connect to h:8: [Errno 111] Connect call failed")
    # A client-internal error takes the cause logged for the address, not its own name.
    line = causes.unreachable(None, NodeNotReadyError("node which is not ready"), "h:8")
    assert line.startswith("cluster at h:8 unreachable: connection refused: ")


def _settings(extra: str) -> MirrorSettings:
    return parse_config("clusters = a, b\na.bootstrap.servers = h:1\nb.bootstrap.servers = h:2\n"
                        "a->b.enabled = true\n" + extra, source="mm2.properties")


def test_bad_jaas_is_a_configuration_error_naming_the_prefixed_key_without_the_secret() -> None:
    settings = _settings("b.security.protocol = SASL_PLAINTEXT\nb.sasl.mechanism = PLAIN\n"
                         "b.sasl.jaas.config = org.apache.kafka.common.security.plain."
                         "PlainLoginModule required username='u' password='hunter2'\n")
    with pytest.raises(ConfigError) as caught:
        check_clients(settings)
    assert caught.value.key == "b.sasl.jaas.config"
    assert "hunter2" not in str(caught.value)


def test_good_client_settings_pass() -> None:
    assert check_clients(_settings("")) == []


async def test_controller_health_follows_connection_and_flapping() -> None:
    """The controller's health verdict, without any cluster: not connected, connected and
    steady, and leadership changing hands too often (the flapping the issue saw)."""
    import time

    from mirrorline.controller.service import FLAP_CHANGES, ControllerService

    service = ControllerService(_settings(""), controller_id="c1")
    serving, why = service.healthy
    assert not serving and "connecting" in why
    service.connect_error = None
    assert service.healthy == (True, "")
    now = time.monotonic()
    service._changes = [now - i for i in range(FLAP_CHANGES)]
    serving, why = service.healthy
    assert not serving and "leadership changed" in why
    service._changes = [now - 3600.0] * FLAP_CHANGES  # long ago: steady again
    assert service.healthy == (True, "")


async def test_a_stop_given_up_on_leaves_no_unretrieved_error_behind() -> None:
    """A replicator stopping with a cluster gone gave up on `gather(flow stops)` after its
    budget; the cancelled gather ended with an error nobody read, and asyncio logged it at
    exit as `_GatheringFuture exception was never retrieved` with a traceback."""
    import asyncio
    import gc

    from mirrorline.runtime import stop_within

    unretrieved: list[dict[str, object]] = []
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))
    try:
        async def slow_stop() -> None:
            await asyncio.sleep(30)

        assert not await stop_within(asyncio.gather(slow_stop(), slow_stop()), 0.05, "stopping")
        await asyncio.sleep(0.5)  # the cancelled children end
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(previous)
    assert unretrieved == []


async def test_one_shot_reads_of_an_unreachable_cluster_leave_no_unclosed_client() -> None:
    """While the target was down, every check of it (the high watermarks read before a
    failed batch is sent again) left a consumer whose start had failed unclosed, and
    aiokafka logged `ERROR Unclosed AIOKafkaConsumer` each time. Nothing listens on the
    port used here: a cluster that is down, for real."""
    import asyncio
    import gc
    import socket

    from aiokafka.errors import KafkaConnectionError

    from mirrorline.kafka.heartbeats import newest_heartbeats
    from mirrorline.kafka.watermarks import high_watermarks

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    kwargs = {"bootstrap_servers": address, "request_timeout_ms": 1000}
    reported: list[dict[str, object]] = []
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        with pytest.raises(KafkaConnectionError):
            await high_watermarks(kwargs, ["orders"])
        with pytest.raises(KafkaConnectionError):
            await newest_heartbeats("backup", kwargs, ["heartbeats"])
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(previous)
    assert [c.get("message") for c in reported] == []


async def test_an_aborted_producer_leaves_no_unretrieved_error_behind() -> None:
    """After a send was aborted (a silent target), the replicator logged `ERROR Future
    exception was never retrieved` with a traceback when it exited: a batch not sent yet
    also fails its drain waiter, which nobody awaits. The producer is aiokafka's, never
    started (no cluster is needed to queue a batch)."""
    import asyncio
    import gc

    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    from mirrorline.kafka.producer_abort import SendAborted, abort_producer

    reported: list[dict[str, object]] = []
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9")
        builder = producer.create_batch()
        builder.append(key=None, value=b"v", timestamp=None)
        inner: Any = producer
        delivered = await inner._message_accumulator.add_batch(
            builder, TopicPartition("orders", 0), 1.0)
        await abort_producer(producer, "the target acknowledged no batch for 2s")
        with pytest.raises(SendAborted):
            await delivered
        del delivered, builder, producer, inner
        gc.collect()
        await asyncio.sleep(0)
        gc.collect()
    finally:
        loop.set_exception_handler(previous)
    assert [c.get("message") for c in reported] == []
