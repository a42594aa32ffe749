"""An append to the control log that the log's own reader applies before the broker's
acknowledgement comes back. That happens on a busy controller (the reader's fetch
response is handled before the produce response) and is the log working, not going
backwards: the append returns its record's fate, and the state is not rebuilt.

The order cannot be forced through the broker, so the test holds each acknowledgement
back until the reader has applied the record it acknowledges; the broker, the producer
and the reader are real."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from helpers import create_topic

from mirrorline.controlplane.log import ControlLog
from mirrorline.dev.brokers import LocalBroker
from mirrorline.v1 import control_pb2

pytestmark = pytest.mark.integration


async def test_an_append_applied_before_its_acknowledgement_is_not_a_regression(
        backup: LocalBroker, unique: str, caplog: pytest.LogCaptureFixture) -> None:
    topic = f"{unique}-control"
    await create_topic(backup.bootstrap, topic, 1)
    kwargs = {"bootstrap_servers": backup.bootstrap}
    control = ControlLog(consumer_kwargs=kwargs, producer_kwargs=kwargs, topic=topic)
    await control.start()
    assert control._producer is not None
    send_and_wait = control._producer.send_and_wait

    async def late_acknowledgement(*args: Any, **kw: Any) -> Any:
        metadata = await send_and_wait(*args, **kw)
        await control.wait_applied(metadata.offset, 30)
        return metadata

    control._producer.send_and_wait = late_acknowledgement  # type: ignore[method-assign]
    caplog.set_level(logging.ERROR, logger="mirrorline.controlplane.log")
    try:
        offsets = [(await control.append(control_pb2.ControlRecord(controller_id=f"c{i}")))[0]
                   for i in range(3)]
        assert offsets == sorted(set(offsets))
        assert control.regressed is None, control.regressed
        assert "went backwards" not in caplog.text
    finally:
        await control.stop()
