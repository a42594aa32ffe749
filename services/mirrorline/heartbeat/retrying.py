"""The one retry loop behind every background part of the heartbeat service.

Emitters, topology watchers, canary senders and readers and audit readers all do the
same thing around their work: connect, run until something fails, then say why in one
line (once per distinct reason, not per attempt), wait with backoff and try again --
and stop at once when cancelled. Each part subclasses `Retrying` and writes only its
session and how to word a failure.
"""

from __future__ import annotations

import asyncio
import logging

from mirrorline.core.backoff import Backoff
from mirrorline.runtime import cancel_and_wait

log = logging.getLogger(__name__)

#: Longest wait between attempts, in seconds.
MAX_BACKOFF_S = 10.0


class Retrying:
    """A background task that runs `_session()` again after each failure, with backoff.

    `error` holds why the part cannot work now (None: it can). A session calls
    `_ready()` once it is connected: that clears the error and restarts the backoff.
    """

    #: What `error` says before the first session connected.
    initial_error: str | None = None

    def __init__(self, name: str) -> None:
        self.name = name
        self.error: str | None = self.initial_error
        self._task: asyncio.Task[None] | None = None
        self._attempt = 0
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._retry(), name=self.name)

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            await cancel_and_wait(self._task)

    async def _session(self) -> None:
        raise NotImplementedError

    def _describe(self, exc: Exception) -> tuple[str, str]:
        """(the error to show, the line to log) for a failed session."""
        reason = f"{self.name}: {exc!r}"
        return reason, reason

    def _set_error(self, error: str | None) -> None:
        self.error = error

    def _ready(self) -> None:
        if self.error is not None and self.error != self.initial_error:
            log.info("%s: reachable again", self.name)
        self._set_error(None)
        self._attempt = 0

    async def _retry(self) -> None:
        backoff = Backoff(maximum=MAX_BACKOFF_S)
        while not self._stopping:
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error, line = self._describe(exc)
                if error != self.error:
                    log.warning("%s; retrying", line)
                self._set_error(error)
                await asyncio.sleep(backoff.delay(self._attempt))
                self._attempt += 1
