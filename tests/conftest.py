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
import os
import secrets
from collections.abc import AsyncIterator, Mapping
from types import MappingProxyType
from typing import Any

import pytest

from mirrorline.dev import kafka
from mirrorline.dev.brokers import start_broker, stop_broker_async

CLUSTER_ALIASES = ("primary", "backup")
BROKER_ENV = "MIRRORLINE_TEST_BROKER"
BROKERS = ("kafka", "tansu")


def broker_kind() -> str:
    """The broker the suite runs on: `kafka` (the default) or `tansu`."""
    kind = os.environ.get(BROKER_ENV, "kafka").strip().lower() or "kafka"
    if kind not in BROKERS:
        raise pytest.UsageError(f"{BROKER_ENV}={kind!r}: expected one of {', '.join(BROKERS)}")
    return kind


def pytest_configure(config: pytest.Config) -> None:
    kind = broker_kind()
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


#: Broker settings of the shared Kafka clusters. Tests write records with fixed timestamps
#: from the past (to check that a mirror keeps them exactly); Kafka's default time retention
#: (7 days, measured from the records' timestamps, checked every second on a dev cluster)
#: would delete them before a mirror reads them. Retention tests set it per topic.
SHARED_KAFKA_SETTINGS: Mapping[str, str] = {"log.retention.ms": "-1"}


async def start_cluster(alias: str, directory: Any, **options: Any) -> Any:
    """One cluster of the suite's broker kind (Kafka options apply to Kafka only)."""
    if broker_kind() == "kafka":
        options["overrides"] = {**SHARED_KAFKA_SETTINGS, **options.get("overrides", {})}
        return await kafka.start_kafka(alias, directory=directory / alias, **options)
    return await start_broker(alias, log_dir=directory)


async def stop_cluster(cluster: Any) -> None:
    if isinstance(cluster, kafka.LocalKafkaCluster):
        await kafka.stop_kafka(cluster, timeout=2.0)
    else:
        await stop_broker_async(cluster.pid)


@pytest.fixture(scope="session")
async def clusters(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Mapping[str, Any]]:
    """Alias -> running cluster (LocalKafkaCluster or LocalBroker) for `primary` and `backup`."""
    directory = tmp_path_factory.mktemp("brokers")
    results = await asyncio.gather(
        *(start_cluster(alias, directory) for alias in CLUSTER_ALIASES),
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
