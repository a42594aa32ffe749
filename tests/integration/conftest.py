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
