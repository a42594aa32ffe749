"""Session-wide fixtures: two local Tansu clusters, `primary` and `backup`, shared by all tests.

Starting a broker takes well under a second, but sharing them keeps the suite fast; tests
isolate themselves by topic name through the `unique` fixture instead. The brokers use
memory storage, free loopback ports and log under a pytest temp dir; they are stopped at
session end whatever happened (and at interpreter exit at the latest, by
`mirrorline.dev.brokers`).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Mapping
from types import MappingProxyType

import pytest

from mirrorline.dev.brokers import LocalBroker, start_broker, stop_broker_async

CLUSTER_ALIASES = ("primary", "backup")


@pytest.fixture(scope="session")
async def clusters(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Mapping[str, LocalBroker]]:
    """Alias -> running LocalBroker for the clusters `primary` and `backup`."""
    log_dir = tmp_path_factory.mktemp("brokers")
    results = await asyncio.gather(
        *(start_broker(alias, log_dir=log_dir) for alias in CLUSTER_ALIASES),
        return_exceptions=True,
    )
    started = [result for result in results if isinstance(result, LocalBroker)]
    try:
        for result in results:
            if isinstance(result, BaseException):
                raise result
        yield MappingProxyType({broker.alias: broker for broker in started})
    finally:
        await asyncio.gather(*(stop_broker_async(broker.pid) for broker in started))


@pytest.fixture(scope="session")
def primary(clusters: Mapping[str, LocalBroker]) -> LocalBroker:
    return clusters["primary"]


@pytest.fixture(scope="session")
def backup(clusters: Mapping[str, LocalBroker]) -> LocalBroker:
    return clusters["backup"]


@pytest.fixture
def unique() -> str:
    """A fresh name prefix like `t1a2b3c4d`, so each test has its own topics and groups."""
    return f"t{secrets.token_hex(4)}"
