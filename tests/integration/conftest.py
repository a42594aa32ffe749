"""Fixtures shared by integration test files (the session's clusters: tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mirrorline.dev.brokers import load_state, stop_broker_async


@pytest.fixture
async def state_dir(tmp_path: Path) -> AsyncIterator[Path]:
    """A state dir for `mirrorline dev brokers`; every process of every broker the CLI left
    recorded there is stopped afterwards."""
    directory = tmp_path / "state"
    yield directory
    for broker in load_state(directory).values():
        for pid in broker.all_pids:
            await stop_broker_async(pid)


@pytest.fixture(scope="session")
def spark_class_archive() -> Path | None:
    """The Spark driver's class-data archive, made once per machine before the first Spark
    test (a throwaway session; every later driver start then takes about half the CPU)."""
    from mirrorline_spark.executor.classdata import make_archive

    return make_archive()


@pytest.fixture(autouse=True)
def _spark_starts_from_its_archive(request: pytest.FixtureRequest) -> None:
    if request.node.module.__name__.startswith("test_spark"):
        request.getfixturevalue("spark_class_archive")
