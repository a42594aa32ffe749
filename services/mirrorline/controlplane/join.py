"""Opening the control log for a managed service, however long the home cluster is away.

Every managed service (checkpointer, config sync, heartbeat, Spark executor) must come up
while its home cluster does not answer: serve gRPC with health NOT_SERVING, say once per
attempt why it cannot read the control log, and keep trying until it can or until it is
stopped. A crash with a traceback would only make `mirrorline run` restart it in a loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from mirrorline.controlplane.home import control_topics, home_clients, home_cluster
from mirrorline.controlplane.log import ControlLog
from mirrorline.core.backoff import Backoff
from mirrorline.core.settings import MirrorSettings
from mirrorline.kafka.causes import unreachable
from mirrorline.runtime import stop_within

log = logging.getLogger(__name__)


async def open_control_log(settings: MirrorSettings, targets: Sequence[str] | None,
                           client_id: str, *,
                           report: Callable[[str | None], None] = lambda _: None,
                           ) -> ControlLog:
    """The deployment's control log, started (replayed to its end).

    While the home cluster does not answer, `report` gets the reason (None once it does)
    and the attempt is repeated with backoff up to 30 s. Cancelling the caller stops it.
    """
    home = home_cluster(settings, targets)
    consumer, _, _ = home_clients(settings, home, client_id)
    servers = dict(settings.clusters[home].connection).get("bootstrap.servers")
    backoff, attempt = Backoff(initial=1.0, maximum=30.0), 0
    while True:
        control = ControlLog(consumer_kwargs=consumer, topic=control_topics(settings)[0])
        try:
            await control.start()
        except asyncio.CancelledError:  # stopped while connecting: close what it opened
            await stop_within(control.stop(), 0.3, "closing the control log reader")
            raise
        except Exception as exc:
            await stop_within(control.stop(), 1.0, "closing the control log reader")
            delay = backoff.delay(attempt)
            attempt += 1
            reason = unreachable(home, exc, servers, role="home")
            report(reason)
            log.warning("%s; retrying in %.0fs", reason, delay)
            await asyncio.sleep(delay)
            continue
        report(None)
        return control
