"""Joining the control plane, however long the home cluster is away: the one retry loop.

Every service that reads the control log (replicator worker, controller, and the
checkpointer, config sync, heartbeat and Spark executor when managed) must come up while
its home cluster does not answer: serve gRPC with health NOT_SERVING, say once per
attempt why it cannot join -- in the one unreachable-cluster form
(`mirrorline.kafka.causes.unreachable`) -- and keep trying until it can or until it is
stopped. A crash with a traceback would only make `mirrorline run` restart it in a loop.
`mirrorline.servicehost.ServiceHost` runs this for every service.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from mirrorline.core.backoff import Backoff
from mirrorline.core.settings import MirrorSettings
from mirrorline.kafka.causes import unreachable
from mirrorline.runtime import stop_within

log = logging.getLogger(__name__)


async def join_home(settings: MirrorSettings, home: str,
                    attempt: Callable[[], Awaitable[None]],
                    close: Callable[[], Awaitable[None]], *,
                    report: Callable[[str | None], None] = lambda _: None) -> None:
    """Run `attempt` (open the control plane on `home`) until it succeeds.

    After a failed attempt `close` closes what it opened; `report` gets the reason in the
    one unreachable form (None once the home cluster answered) and the attempt is repeated
    with backoff up to 30 s. Cancelling the caller stops it, closing what was opened.
    """
    servers = dict(settings.clusters[home].connection).get("bootstrap.servers")
    backoff, tries = Backoff(initial=1.0, maximum=30.0), 0
    while True:
        try:
            await attempt()
        except asyncio.CancelledError:  # stopped while connecting: close what it opened
            await stop_within(close(), 0.3, "closing the control log reader")
            raise
        except Exception as exc:
            await stop_within(close(), 1.0, "closing the control log reader")
            delay = backoff.delay(tries)
            tries += 1
            reason = unreachable(home, exc, servers, role="home")
            report(reason)
            log.warning("%s; retrying in %.0fs", reason, delay)
            await asyncio.sleep(delay)
            continue
        report(None)
        return
