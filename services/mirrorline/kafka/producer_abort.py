"""Stop an aiokafka producer at once, so that nothing it holds is ever sent again.

`AIOKafkaProducer.stop()` waits until every pending batch is delivered or expired, and
while a target is unreachable aiokafka keeps re-sending a batch until it expires (about
twice `request.timeout.ms` after it was created). A partition that is handed to another
owner cannot wait for that: a batch landing after the new owner looked at the target is
a duplicate out of order. `abort_producer` closes every connection first (requests on
the wire fail at once), then stops the sender and fails every batch still queued, so each
send future resolves with `reason` and no byte of it is sent afterwards.

aiokafka has no public API for this; the attributes used are its sender, accumulator and
client, stable across the 0.10-0.12 releases. A request the broker already read from the
socket may still be appended -- the next owner's tail match sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

log = logging.getLogger(__name__)


class SendAborted(KafkaError):  # type: ignore[misc]
    """A send that was cancelled on purpose; the records may or may not be on the target."""

    retriable = True


#: How long a cancelled sender may take to finish its requests under way, at most.
_SENDER_EXIT_S = 1.0


async def abort_producer(producer: AIOKafkaProducer, reason: str) -> None:
    """Fail everything `producer` holds with `SendAborted(reason)` and close it."""
    inner: Any = producer
    inner._closed = True
    sender = getattr(inner, "_sender", None)
    task = getattr(sender, "sender_task", None)
    if task is not None and not task.done():
        task.cancel()
    with contextlib.suppress(Exception):
        await inner.client.close()  # requests on the wire fail now, nothing is re-sent
    if task is not None:
        # Cancelled, the sender still waits for its requests under way; one that lost its
        # connection (a request timed out on a silent target) waits for a metadata update
        # the closed client never makes, so that wait never ended and neither did the
        # abort (the flow never got a new producer). A second cancel ends such a request.
        await asyncio.wait({task}, timeout=_SENDER_EXIT_S)
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    accumulator = inner._message_accumulator
    # A batch re-queued for a retry still carries the callback that removes it from the
    # pending set when it completes; put it back there so failing it is not an error.
    for batches in accumulator._batches.values():
        accumulator._pending_batches.update(batches)
    failed = list(accumulator._pending_batches)
    accumulator.fail_all(SendAborted(reason))
    for batch in failed:  # whoever awaits them sees the error; nobody else must warn
        # A batch not drained yet also fails its drain waiter, which nobody awaits unless
        # a send was queueing behind it: asyncio logged it at exit, with a traceback.
        for future in (batch.future, batch._drain_waiter):
            if future.done() and not future.cancelled():
                future.exception()
    log.debug("producer aborted: %s", reason)
