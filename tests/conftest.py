"""Session-wide fixtures: two local clusters, `primary` and `backup`, shared by all tests.

The suite runs on Apache Kafka (KRaft, one node per cluster, from `make kafka`), the broker
users run; `MIRRORLINE_TEST_BROKER=tansu` runs it on the embedded Tansu broker instead (the
pip-only path, `make test-tansu`). Tests that only one broker can run carry the marker
`kafka_only` or `tansu_only` and are skipped on the other. Sharing two clusters keeps the
suite fast; tests isolate themselves by topic name through the `unique` fixture. Brokers
listen on free loopback ports and log under a pytest temp dir; they are stopped at session
end whatever happened (and at interpreter exit at the latest).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Mapping
from types import MappingProxyType
from typing import Any

import pytest
from helpers import BROKER_ENV, broker_kind, start_cluster, stop_cluster

from mirrorline.dev import kafka
from mirrorline.runtime import tune_kafka_io

CLUSTER_ALIASES = ("primary", "backup")


def pytest_configure(config: pytest.Config) -> None:
    # The tests' own clients connect as every service's do (`mirrorline.runtime`).
    tune_kafka_io()
    try:
        kind = broker_kind()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from exc
    if kind == "kafka" and not kafka.available():
        try:
            kafka.require()
        except kafka.KafkaNotInstalled as exc:
            raise pytest.UsageError(
                f"{exc}\n(or run the suite on Tansu: {BROKER_ENV}=tansu)") from exc


def pytest_report_header(config: pytest.Config) -> str:
    kind = broker_kind()
    if kind == "kafka":
        return f"brokers: Apache Kafka {kafka.KAFKA_VERSION} (KRaft)"
    return "brokers: Tansu (embedded)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kind = broker_kind()
    for item in items:
        for marker, needed in (("kafka_only", "kafka"), ("tansu_only", "tansu")):
            if item.get_closest_marker(marker) and kind != needed:
                item.add_marker(pytest.mark.skip(reason=f"runs on {needed} brokers only"))


@pytest.fixture(scope="session")
async def clusters(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Mapping[str, Any]]:
    """Alias -> running cluster (LocalKafkaCluster or LocalBroker) for `primary` and `backup`."""
    directory = tmp_path_factory.mktemp("brokers")
    results = await asyncio.gather(
        *(start_cluster(alias, directory / alias) for alias in CLUSTER_ALIASES),
        return_exceptions=True,
    )
    started = [result for result in results if not isinstance(result, BaseException)]
    try:
        for result in results:
            if isinstance(result, BaseException):
                raise result
        yield MappingProxyType({broker.alias: broker for broker in started})
    finally:
        await asyncio.gather(*(stop_cluster(broker) for broker in started))


@pytest.fixture(scope="session")
def primary(clusters: Mapping[str, Any]) -> Any:
    return clusters["primary"]


@pytest.fixture(scope="session")
def backup(clusters: Mapping[str, Any]) -> Any:
    return clusters["backup"]


@pytest.fixture
def unique() -> str:
    """A fresh name prefix like `t1a2b3c4d`, so each test has its own topics and groups."""
    return f"t{secrets.token_hex(4)}"
