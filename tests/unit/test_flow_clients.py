"""How large the replicator's produce batches and requests are."""

from __future__ import annotations

from mirrorline.kafka.clients import producer_kwargs
from mirrorline.kafka.flowclients import DEFAULT_BATCH_BYTES, batch_sizes


def sizes(java: dict[str, str]) -> dict[str, int]:
    kwargs, _ = producer_kwargs({"bootstrap.servers": "b:9092", **java})
    return batch_sizes(java, kwargs)


def test_batches_default_to_a_mebibyte_with_room_in_the_request() -> None:
    assert sizes({}) == {"max_batch_size": DEFAULT_BATCH_BYTES,
                         "max_request_size": DEFAULT_BATCH_BYTES + 65536}


def test_an_operators_batch_size_is_used_as_is() -> None:
    assert sizes({"batch.size": "16384"}) == {"max_batch_size": 16384,
                                             "max_request_size": 1048576}


def test_an_operators_request_limit_caps_the_batch() -> None:
    # A target with a small message.max.bytes is configured through max.request.size:
    # batches must never be built larger than that.
    assert sizes({"max.request.size": "200000"}) == {"max_batch_size": 200000,
                                                    "max_request_size": 200000}
    assert sizes({"max.request.size": "200000", "batch.size": "65536"}) == {
        "max_batch_size": 65536, "max_request_size": 200000}
