"""Logs stay quiet while everything works: nothing at ERROR from a healthy service."""

from __future__ import annotations

import logging

import pytest
from helpers import wait_for

from mirrorline.dev.brokers import LocalBroker
from mirrorline.heartbeat.audit_app import AuditApp, AuditTopics

pytestmark = pytest.mark.integration


async def test_the_audit_tables_changelogs_raise_no_stream_alarm(
        primary: LocalBroker, unique: str, caplog: pytest.LogCaptureFixture) -> None:
    """Faust's livelock check looks at every assigned partition whose topic a stream
    acknowledges; it used to count the tables' changelogs among them and, from
    `stream_processing_timeout` (5 minutes) after start, log "Stream has not started
    processing TP(...-changelog.internal)" at ERROR every 7 s. Here that timeout is 1 s
    and the check runs every half second (faust settings, not our code), and the table is
    written (so its changelog grows past what recovery read): the check must stay quiet."""
    caplog.set_level(logging.ERROR)
    app = AuditApp("primary", primary.bootstrap, {}, app_id=f"{unique}-audit",
                   topics=AuditTopics.for_deployment(unique),
                   admin_kwargs={"bootstrap_servers": primary.bootstrap},
                   on_verdict=lambda _key, _value: None)
    app.app.conf.stream_processing_timeout = 1.0
    app.app.conf.broker_commit_interval = 0.2  # the livelock check runs every 2.5 of these
    checks = 0
    consumer = app.app.consumer
    verify = consumer.verify_all_partitions_active

    async def counted() -> None:
        nonlocal checks
        await verify()
        checks += 1
    consumer.verify_all_partitions_active = counted  # type: ignore[method-assign]
    await app.start()
    try:
        for n in range(3):  # table writes through the agent: changelog records
            await app.send({"kind": "init", "flow": f"f{n}", "start": n})
        async def folded() -> bool:
            return all(app.first_window(f"f{n}") == n for n in range(3))
        await wait_for(folded, 30, "the agent did not fold the events into the table")
        seen = checks

        async def checked() -> bool:
            return checks >= seen + 4
        await wait_for(checked, 30, "faust's livelock check did not run")
    finally:
        await app.stop()
    # (aiokafka's own lines are kept out of a service's log: see `kafka.causes`)
    errors = [r.getMessage()[:300] for r in caplog.records
              if r.levelno >= logging.ERROR and not r.name.startswith("aiokafka")]
    assert errors == []
