"""The pure parts of pipelining (`mirrorline.kafka.pipelining`): which producers pipeline
and how deep, what a node or partition may still take, when a failed batch may be retried.
The producers are real aiokafka producers, never started (no broker is needed to tell
which sender they got)."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition

from mirrorline.core.config import parse_config
from mirrorline.core.errors import ConfigError
from mirrorline.kafka.clients import producer_kwargs
from mirrorline.kafka.pipelining import (
    CountingSet,
    PipeliningSender,
    batch_limit,
    depth,
    install,
    max_in_flight,
    may_retry,
)
from mirrorline.kafka.preflight import check_clients

KEY = "max.in.flight.requests.per.connection"
BOOT = {"bootstrap.servers": "k1:9092"}


def test_the_default_is_kafkas_five() -> None:
    assert max_in_flight({}, idempotent=True) == 5
    assert max_in_flight({KEY: " 1 "}, idempotent=True) == 1
    assert max_in_flight({KEY: "12"}, idempotent=False) == 12


@pytest.mark.parametrize("value", ["0", "-1", "two", ""])
def test_a_bad_value_names_the_key(value: str) -> None:
    with pytest.raises(ConfigError, match=KEY):
        max_in_flight({KEY: value}, idempotent=True)


def test_more_than_five_with_idempotence_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=f"{KEY}.*at most 5.*enable.idempotence"):
        max_in_flight({KEY: "6"}, idempotent=True)
    # The configuration check reads every producer config the same way.
    with pytest.raises(ConfigError, match=KEY):
        producer_kwargs({**BOOT, KEY: "6"})
    with pytest.raises(ConfigError, match=KEY):
        producer_kwargs({**BOOT, KEY: "6", "enable.idempotence": "true"})
    kwargs, ignored = producer_kwargs({**BOOT, KEY: "6", "enable.idempotence": "false"})
    assert KEY not in ignored and "max_in_flight" not in str(kwargs)


def test_a_node_or_partition_takes_more_until_the_limit() -> None:
    nodes = CountingSet(3)
    assert not nodes and 1 not in nodes
    nodes.add(1)
    nodes.add(1)
    assert nodes and 1 not in nodes, "two requests in flight: a third may go"
    nodes.add(1)
    assert 1 in nodes and list(nodes) == [1]
    nodes.remove(1)
    assert 1 not in nodes
    nodes.remove(1)
    nodes.remove(1)
    assert not nodes
    with pytest.raises(KeyError):
        nodes.remove(1)


def test_a_held_partition_takes_nothing_whatever_its_count() -> None:
    tp = TopicPartition("t", 0)
    muted = CountingSet(5)
    muted.add(tp)
    muted.hold(tp)
    assert tp in muted and muted | {TopicPartition("t", 1)} == {tp, TopicPartition("t", 1)}
    muted.release(tp)
    assert tp not in muted


def test_a_retriable_failure_is_retried_only_when_its_batch_travelled_alone() -> None:
    assert may_retry(1)
    assert not may_retry(2)


async def test_which_producers_pipeline() -> None:
    idempotent = AIOKafkaProducer(bootstrap_servers="k1:9092", enable_idempotence=True)
    assert install(idempotent, 5) == 5 and depth(idempotent) == 5
    assert isinstance(idempotent._sender, PipeliningSender)
    one = AIOKafkaProducer(bootstrap_servers="k1:9092", enable_idempotence=True)
    assert install(one, 1) == 1 and depth(one) == 1
    plain = AIOKafkaProducer(bootstrap_servers="k1:9092")
    assert install(plain, 5) == 1 and not isinstance(plain._sender, PipeliningSender)
    transactional = AIOKafkaProducer(bootstrap_servers="k1:9092", transactional_id="t")
    assert install(transactional, 5) == 1 and depth(transactional) == 1
    for producer in (idempotent, one, plain, transactional):
        producer._closed = True  # never started


def test_a_partition_sends_one_batch_until_the_broker_wrote_one_of_this_producer() -> None:
    """A broker takes a new producer's first batch whatever its sequence: were two in
    flight and the first refused, the second would be written in its place."""
    assert batch_limit(5, written=False) == 1
    assert batch_limit(5, written=True) == 5
    tp = TopicPartition("t", 0)
    written: set[object] = set()
    muted = CountingSet(5, written)
    muted.add(tp)
    assert tp in muted, "one batch travels before the first is written"
    written.add(tp)
    assert tp not in muted
    for _ in range(4):
        muted.add(tp)
    assert tp in muted


def test_the_configuration_check_names_the_key_as_written_and_its_line() -> None:
    settings = parse_config("clusters = a, b\na.bootstrap.servers = h:1\nb.bootstrap.servers = "
                            "h:2\na->b.enabled = true\nb.producer." + KEY + " = 8\n",
                            source="mm2.properties")
    with pytest.raises(ConfigError) as caught:
        check_clients(settings)
    assert caught.value.key == f"b.producer.{KEY}"
    assert "mm2.properties:5:" in str(caught.value) and "at most 5" in str(caught.value)
    fine = parse_config("clusters = a, b\na.bootstrap.servers = h:1\nb.bootstrap.servers = "
                        "h:2\na->b.enabled = true\nb.producer." + KEY + " = 1\n",
                        source="mm2.properties")
    assert check_clients(fine) == []  # read, so not reported as without effect
