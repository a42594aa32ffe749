"""Process plumbing shared by every service: logging, signals, an orderly stop.

Each service is an object with `async start()` and `async stop()`. `run_service` runs
it on a fresh event loop until SIGTERM or SIGINT, then stops it once, so `mirrorline
run`, Kubernetes and a terminal's Ctrl-C all get the same clean shutdown.

Stopping is bounded: a client talking to an unreachable cluster can wait tens of seconds
in a close (a producer flushing to a target that is down, a metadata request in flight).
`stop()` gets `STOP_BUDGET_S` to save what it can; whatever is still running after that
is cancelled and abandoned, so a service is gone within a couple of seconds of SIGTERM
in every state -- connecting, retrying or draining. A second signal exits at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from mirrorline import logsecrets
from mirrorline.kafka.autocreate import forbid_auto_creation
from mirrorline.kafka.causes import quiet_aiokafka
from mirrorline.kafka.connio import use_own_connection_io
from mirrorline.kafka.produce_request import encode_produce_requests_flat

log = logging.getLogger(__name__)

#: Time `stop()` gets after SIGTERM before the process gives up on it and exits (a
#: service may ask for more with a `stop_budget_s` attribute, still a few seconds).
STOP_BUDGET_S = 1.7
#: Time tasks still running after `stop()` get to finish once cancelled.
CANCEL_BUDGET_S = 0.3


class Service(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def configure_logging(service: str, level: str = "INFO") -> None:
    """Log to stderr at `level`, through `mirrorline.logsecrets`' filter: no secret
    reaches a log line, at DEBUG either (secrets of the properties file are registered
    with it once the file is read)."""
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format=f"%(asctime)s %(levelname)-7s {service} %(name)s: %(message)s",
    )
    logsecrets.install()
    # aiokafka reports every failed connection attempt at ERROR; our probes already say
    # "cluster X unreachable" once, with the reason -- which they take from what aiokafka
    # logged (authentication failed, TLS handshake failed, connection refused).
    quiet_aiokafka(debug=level.upper() == "DEBUG")


async def serve(service: Service) -> None:
    """Start `service`, wait for SIGTERM/SIGINT, stop it (within `STOP_BUDGET_S`)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def signalled() -> None:
        if stop.is_set():  # a second signal: the operator does not want to wait
            log.warning("second signal: exiting now")
            os._exit(1)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, signalled)
    start = asyncio.create_task(service.start())
    waiter = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({start, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if start in done and start.exception() is not None:
        waiter.cancel()
        await stop_within(service.stop(), STOP_BUDGET_S, "stopping after a failed start")
        raise start.exception()  # type: ignore[misc]
    await waiter
    log.info("stopping")
    if not start.done():
        start.cancel()
        await stop_within(asyncio.gather(start, return_exceptions=True), CANCEL_BUDGET_S,
                          "abandoning start-up")
    await stop_within(service.stop(), getattr(service, "stop_budget_s", STOP_BUDGET_S),
                      "stopping")
    log.info("stopped")


#: Seconds between cancellations of a task that has not ended yet.
RECANCEL_S = 1.0


async def cancel_and_wait(*tasks: asyncio.Task[Any]) -> None:
    """Cancel `tasks` and wait until every one has ended, cancelling again as needed.

    One cancellation is not always enough: a Kafka client connecting to a cluster that
    does not answer can swallow it (aiokafka's bootstrap catches broad errors), and the
    task then carries on into its retry loop -- a stop that never ends.
    """
    pending = {t for t in tasks if not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _done, pending = await asyncio.wait(pending, timeout=RECANCEL_S)


async def stop_within(awaitable: Awaitable[object], budget: float, what: str) -> bool:
    """Await `awaitable` for at most `budget` seconds; on overrun cancel it and go on.

    Returns False (after one warning) when the budget ran out. Used for every close that
    may talk to a cluster: a stop must never wait on one that does not answer.
    """
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=budget)
    if task in done:
        if not task.cancelled() and task.exception() is not None:
            log.warning("%s failed: %r", what, task.exception())
        return True
    task.cancel()
    # Whenever it ends, its outcome is read here: a cancelled `gather` ends with an error
    # that asyncio would otherwise log, with a traceback, as never retrieved.
    task.add_done_callback(_read_outcome)
    await asyncio.wait({task}, timeout=CANCEL_BUDGET_S)
    log.warning("%s took over %.1fs (a cluster does not answer); not waiting for it", what,
                budget)
    _abandoned.append(what)
    return False


def _read_outcome(task: asyncio.Future[object]) -> None:
    if not task.cancelled():
        task.exception()


#: Stops given up on (see `stop_within`): their clients are left unclosed at exit.
_abandoned: list[str] = []


#: Allocations between young-generation collections (CPython's default is 700).
GC_THRESHOLDS = (50_000, 20, 100)


def tune_gc() -> None:
    """Make garbage collection cheap for a process that moves records in bulk.

    A fetch materialises tens of thousands of record objects at once and they live until
    the target acknowledges them. With CPython's default threshold that burst triggers
    dozens of collections, each walking the records still alive -- about a quarter of the
    replicator's CPU in the benchmark. Collecting every 50 000 allocations instead costs
    a little memory for short-lived cycles; freezing what start-up created keeps the
    long-lived modules and configuration out of every later full collection.
    """
    gc.set_threshold(*GC_THRESHOLDS)
    gc.freeze()


#: glibc's `mallopt` parameters (malloc.h) and the values `tune_malloc` gives them.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MALLOC_MMAP_THRESHOLD = 32 << 20
MALLOC_TRIM_THRESHOLD = 64 << 20


def tune_malloc() -> bool:
    """Keep freed memory for the next fetch or produce request instead of returning it.

    Fetch responses and produce requests are buffers of a megabyte or more, made and freed
    many times a second. glibc serves them from fresh `mmap`s or trims its heap as soon as
    they are freed, so every such buffer is new memory, and the kernel faults in and zeroes
    it page by page: in a profile of the batch path at 1 KiB records, building a produce
    request cost 2.5-4 µs per KiB with glibc's defaults and 0.15 µs with these thresholds.
    Allocations up to `MALLOC_MMAP_THRESHOLD` come from the heap, and up to
    `MALLOC_TRIM_THRESHOLD` of free heap is kept (at most that much more resident memory).
    Only on glibc; `MIRRORLINE_MALLOC_TUNING=0` keeps its defaults. True when applied.
    """
    if os.environ.get("MIRRORLINE_MALLOC_TUNING", "1") == "0":
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 -- glibc only: musl's mallopt ignores these
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD)
                and mallopt(_M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD))


def tune_kafka_io() -> None:
    """What every process of ours that moves Kafka bytes runs with: the allocator's
    settings (`tune_malloc`), produce requests encoded flat and our own connection I/O
    for every aiokafka client (`kafka/produce_request.py`, `kafka/connio.py`). Services
    (`run_service`), the Spark executor's read and write tasks, the bench and the test
    session call it."""
    tune_malloc()
    encode_produce_requests_flat()
    use_own_connection_io()


def run_service(factory: Callable[[], Service]) -> int:
    """Build and serve a service; returns the process exit status.

    Like `asyncio.run`, except that tasks still alive after the service stopped (a client
    stuck on an unreachable cluster that ignores cancellation) are abandoned after
    `CANCEL_BUDGET_S` instead of being waited for without limit.
    """
    tune_gc()
    tune_kafka_io()
    forbid_auto_creation()  # a deleted topic must stay deleted, whatever the broker allows
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(serve(factory()))
    finally:
        _abandon_leftovers(loop)
    return 0


def _quiet_closed_loop(unraisable: Any) -> None:
    if isinstance(unraisable.exc_value, RuntimeError) and \
            "Event loop is closed" in str(unraisable.exc_value):
        return
    sys.__unraisablehook__(unraisable)


def _abandon_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    leftovers = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in leftovers:
        task.cancel()
    if leftovers:
        with contextlib.suppress(BaseException):
            loop.run_until_complete(asyncio.wait(leftovers, timeout=CANCEL_BUDGET_S))
    stuck = [t for t in leftovers if not t.done()]
    if stuck:
        log.warning("%d tasks did not end when cancelled; exiting without them", len(stuck))
    if stuck or _abandoned:
        # What was abandoned is destroyed at exit, and asyncio would report each piece
        # ("Task was destroyed but it is pending!", "Unclosed AIOKafkaProducer") at ERROR
        # after the service said it stopped; the warnings above already told why.
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        # Coroutines of those tasks are finalised after the loop closed, and each would
        # print "Exception ignored ... Event loop is closed" with a traceback.
        sys.unraisablehook = _quiet_closed_loop
    else:
        with contextlib.suppress(BaseException):
            loop.run_until_complete(loop.shutdown_asyncgens())
    asyncio.set_event_loop(None)
    loop.close()
