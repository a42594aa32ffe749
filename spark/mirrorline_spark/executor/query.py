"""The executor's one streaming query: it copies every partition the executor owns, of
every flow, whatever clusters they come from and go to (one *feed* per flow, see
`mirrorline_spark.options`).

One query rather than one per flow: Spark plans one micro-batch for all partitions, so
the cores go where the records are rather than being split by flow, and the executor
pays for one query's planning and commit workers instead of one per flow. The price is
that any change of what the executor copies restarts the whole query; the restart is
drained, so it copies nothing twice and pauses the other partitions for a moment.

Hand-over is fenced like a replicator worker's: when what the executor copies changes,
the query is drained (the source plans no more data, the micro-batch in flight finishes
and is recorded), stopped, and every flow's progress, offset syncs and offset map are
flushed before the change counts as done; only then does the executor report the
release. The next query starts where each flow's start planner decides, never from
Spark's checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Mapping
from functools import partial

from mirrorline_spark.acks import PartitionAcks
from mirrorline_spark.executor.driver import RunningQuery, SparkDriver
from mirrorline_spark.executor.flowrun import Feed, FlowRun, Key
from mirrorline_spark.executor.holds import Holds

log = logging.getLogger(__name__)

#: How long a hand-over waits for the micro-batch in flight before stopping the query.
DRAIN_S = 20.0
#: How long a micro-batch's commit waits for the event loop to record it.
RECORD_S = 120.0
#: Why acknowledgements not from the running query are refused.
REFUSED = "refused: not from the executor's running query"


class ExecutorQuery:
    def __init__(self, driver: SparkDriver, runs: Mapping[str, FlowRun], *, worker_id: str,
                 workdir: str, holds: Holds) -> None:
        self._driver = driver
        #: Flows whose start failed, held back for a while (shared with the agent).
        self._holds = holds
        #: The executor's flows by name (the agent's, read here, never changed here).
        self._runs = runs
        self.name = "mirrorline_" + re.sub(r"[^A-Za-z0-9_]", "_", worker_id)
        self._drain_file = os.path.join(workdir, "query.drain")
        self._query: RunningQuery | None = None
        #: The number of the running query (each start counts one), None while none runs:
        #: only its micro-batches are recorded.
        self._live: int | None = None
        self._started = 0
        #: The flow of each feed of the running query, by feed index.
        self._feeds: list[str] = []
        #: Why the query failed (the executor gives every partition back), if it did.
        self.problem: str | None = None
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._watch(), name="watch the Spark query")

    async def stop(self, *, drain: bool = True) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        async with self._lock:
            await self._stop_query(drain=drain)

    # -- what runs ----------------------------------------------------------------------
    async def apply(self, wanted: Mapping[str, Mapping[Key, str]], *,
                    drain: bool = True) -> None:
        """Copy exactly `wanted` (flow -> partitions), minus partitions stopped by an
        error; returns once the partitions let go are stopped with their progress
        durable. `drain` False (fenced): stop the query at once rather than let its
        micro-batch finish -- the controller may hand the partitions on as soon as the
        lease runs out."""
        async with self._lock:
            runnable = {}
            for name, run in self._runs.items():
                parts = run.want(wanted.get(name, {}))
                if parts and self.problem is None and not self._holds.held(name):
                    runnable[name] = parts
            running = {name: run.running for name, run in self._runs.items() if run.running}
            if runnable == running and (self._query is not None or not runnable):
                return
            await self._restart(runnable, drain=drain)

    async def _restart(self, runnable: Mapping[str, Mapping[Key, str]], *,
                       drain: bool) -> None:
        await self._stop_query(drain=drain)
        feeds: list[Feed] = []
        for name, parts in sorted(runnable.items()):
            try:
                feed = await self._runs[name].plan(parts)
            except Exception as exc:  # its cluster does not answer: the others go on
                log.warning("%s: cannot start its partitions on Spark yet (%r); the query "
                            "runs without them, trying again in %.0fs", name, exc,
                            self._holds.failed(name))
                continue
            self._holds.started(name)
            if feed is not None:
                feeds.append(feed)
        if feeds:
            await self._start_query(feeds)

    async def _start_query(self, feeds: list[Feed]) -> None:
        source = {"feeds": json.dumps([f.source_option() for f in feeds]),
                  "drainFile": self._drain_file, "layout": "chunks"}
        sink = {"feeds": json.dumps([f.sink_option() for f in feeds])}
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._drain_file)
        # Set before the query starts: its first commit may come as soon as it runs.
        self._started += 1
        self._live = self._started
        self._feeds = [f.flow for f in feeds]
        commit = partial(self._from_spark, asyncio.get_running_loop(), self._live)
        try:
            self._query = await self._driver.start_query(self.name, source, sink, commit)
        except BaseException:
            self._live = None
            self._feeds = []
            raise
        log.info("Spark query copies %d partitions of %d flows: %s",
                 sum(len(f.starts) for f in feeds), len(feeds), "; ".join(
                     f"{f.flow}: " + ", ".join(f"{t}-{p}@{o}"
                                               for (t, p), o in sorted(f.starts.items()))
                     for f in feeds))

    async def _stop_query(self, *, drain: bool = True) -> None:
        query, self._query = self._query, None
        if query is not None:
            # The source plans no more data from now on (it checks this file).
            await asyncio.to_thread(_touch, self._drain_file)
            deadline = time.monotonic() + (DRAIN_S if drain else 0.0)
            with contextlib.suppress(Exception):
                # Spark offers no event for "micro-batch finished": poll its status.
                while time.monotonic() < deadline and await query.trigger_active():  # noqa: ASYNC110
                    await asyncio.sleep(0.1)
            with contextlib.suppress(Exception):
                await query.stop()
            log.info("Spark query stopped%s", "" if drain else " without draining (fenced)")
        # Stopped: its commits are over, and nothing else may hand over acknowledgements.
        self._live = None
        self._feeds = []
        for run in list(self._runs.values()):
            if run.running:
                await run.release()

    # -- acknowledgements ---------------------------------------------------------------
    def _from_spark(self, loop: asyncio.AbstractEventLoop, query: int, batch_id: int,
                    acks: list[PartitionAcks]) -> None:
        """A micro-batch of query number `query`, every task of it done: on PySpark's
        callback thread, hand it to the event loop, which records it (the bookkeeping
        lives there); raise, failing the micro-batch, if it is refused."""
        async def record() -> str | None:
            return self.hand_over(query, batch_id, acks)

        error = asyncio.run_coroutine_threadsafe(record(), loop).result(RECORD_S)
        if error is not None:
            raise RuntimeError(f"mirrorline executor refused micro-batch {batch_id}: {error}")

    def hand_over(self, query: int, batch_id: int, acks: list[PartitionAcks]) -> str | None:
        """Record micro-batch `batch_id` of query number `query` if that query is the one
        running (a late commit of a stopped one is refused: its partitions may have moved
        on); the error that fails the micro-batch otherwise."""
        if query != self._live:
            log.warning("refused micro-batch %d's acknowledgements: not from the running "
                        "Spark query; nothing recorded", batch_id)
            return REFUSED
        return self._on_batch(batch_id, acks)

    def _on_batch(self, batch_id: int, acks: list[PartitionAcks]) -> str | None:
        """Record one micro-batch (everything in it was acknowledged by the target), each
        flow's part through that flow's bookkeeping -- all of it, or nothing when any
        acknowledgement is of a partition the running query does not copy (to the
        remote topic it copies to)."""
        copied = {name: run.running for name, run in self._runs.items()
                  if name in self._feeds}
        foreign = not_copied(acks, copied)
        if foreign:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more"
                                              if len(foreign) > 3 else "")
            log.warning("refused micro-batch %d's acknowledgements: %s not copied by the "
                        "running Spark query; nothing recorded", batch_id, shown)
            return (f"refused micro-batch {batch_id}: acknowledgements of partitions the "
                    f"running query does not copy ({shown})")
        by_flow: dict[str, list[PartitionAcks]] = {}
        for a in acks:
            by_flow.setdefault(a.flow, []).append(a)
        errors = []
        for flow, part in sorted(by_flow.items()):
            errors.extend(self._runs[flow].acknowledged(part))
        return "; ".join(errors) if errors else None

    # -- watching -----------------------------------------------------------------------
    async def _watch(self) -> None:
        """Once a second: every flow's status and offset-sync flushes, and what to do
        about a query that stopped."""
        while True:
            await asyncio.sleep(1.0)
            query = self._query
            status = None
            if query is not None:
                try:
                    status = await query.status()
                except Exception as exc:
                    log.warning("cannot read the Spark query's status: %r", exc)
            latest: dict[str, dict[Key, int]] = {}
            feeds = self._feeds
            for (feed, topic, partition), end in (status.latest if status else {}).items():
                if feed < len(feeds):
                    latest.setdefault(feeds[feed], {})[(topic, partition)] = end
            for name, run in list(self._runs.items()):
                if self._runs.get(name) is run:  # not retired meanwhile
                    await run.tick(latest.get(name, {}), status.batch_ms if status else 0.0)
            if status is None or status.active:
                continue
            async with self._lock:
                if self._query is not query:
                    continue
                if any(run.stopped_running for run in self._runs.values()):
                    # A record was rejected: that partition stops, the others go on.
                    log.warning("restarting the Spark query without the stopped partitions")
                    await self._restart({name: parts for name, run in self._runs.items()
                                         if (parts := run.want(run.owned))}, drain=True)
                    continue
                self.problem = (f"Spark query {self.name} (flows {', '.join(self._feeds)}) "
                                f"failed: {(status.error or 'stopped').splitlines()[0][:500]}")
                log.error("%s; giving its partitions back to the workers", self.problem)
                await self._stop_query()


def not_copied(acks: list[PartitionAcks], copied: Mapping[str, Mapping[Key, str]]
               ) -> list[str]:
    """The acknowledgements (as `flow topic-partition`, names quoted and cut short) of
    partitions `copied` (flow -> partition -> remote topic) does not hold."""
    out = []
    for a in acks:
        if copied.get(a.flow, {}).get((a.topic, a.partition)) != a.remote_topic:
            out.append(f"{a.flow[:100]!r} {a.topic[:250]!r}-{a.partition}")
    return out


def _touch(path: str) -> None:
    with open(path, "w"):
        pass
