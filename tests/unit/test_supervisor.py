"""`mirrorline run`'s supervisor with real child processes (`python -m mirrorline ...`
commands that end at once), for what it logs and whether it restarts."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from mirrorline.core.backoff import Backoff
from mirrorline.supervisor import ChildSpec, Supervisor


async def test_a_clean_exit_is_restarted_without_an_error(
        caplog: pytest.LogCaptureFixture) -> None:
    """A service stopped by someone else's SIGTERM exits 0: it is restarted, and that is
    not reported as an ERROR (`--version` stands for it: it exits 0 at once)."""
    caplog.set_level(logging.INFO, logger="mirrorline.supervisor")
    supervisor = Supervisor([ChildSpec("svc", ("--version",))],
                            backoff=Backoff(initial=0.05, maximum=0.05))
    running = asyncio.create_task(supervisor.run())
    while supervisor.restarts["svc"] < 2:  # noqa: ASYNC110 (the supervisor has no event)
        await asyncio.sleep(0.05)
    supervisor.stop()
    assert await running == 0
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert any("svc stopped (status 0" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING)


async def test_a_service_that_cannot_run_as_configured_stops_everything(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Exit status 2 (a configuration error, a port in use) is never restarted."""
    caplog.set_level(logging.INFO, logger="mirrorline.supervisor")
    supervisor = Supervisor([ChildSpec("bad", ("controller", "--config",
                                               str(tmp_path / "missing.properties")))],
                            backoff=Backoff(initial=0.05, maximum=0.05))
    assert await asyncio.wait_for(supervisor.run(), 60) == 2
    assert supervisor.restarts["bad"] == 0
    assert any("restarting cannot help" in r.getMessage() for r in caplog.records)
