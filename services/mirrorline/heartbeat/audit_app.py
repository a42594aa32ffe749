"""The heartbeat service's state: one faust app per target cluster, its windows in faust
tables (the audit's windows and the canary's latency/sequence windows).

Faust binds an app to one cluster, and the audit of a flow reads two. So each target
cluster gets one app, and the per-window summaries of *both* sides of every flow into it
travel as small events through that app's events topic: the readers (plain aiokafka
consumers, see `audit_reader`) summarise records, the app's single agent folds the
summaries into the table and judges windows. Source data never moves; only counts and
checksums cross over.

Table entries are per flow, side, topic and partition: the next offset to read and the
open windows' (count, checksum). The position and the sums live in one entry, so they
change together: an event applies only if it starts where the entry's position stands.
A replayed event (after a crash) or a stale one is ignored, and a reader that finds its
event ignored re-reads from the table's position. This is what makes a restart exact
even when table recovery comes back a few updates short (as on brokers whose
ListOffsets answers short of the log end): the readers simply re-read those records.

The canary's table works the same way: one entry per flow and partition of the remote
canary topic, holding the next offset to read with the partition's windowed arrival
state (`core.canary.PartitionState`), folded by the same agent from "canaries" events of
the flow's `CanaryReader` (one per report, for every partition read). So a restarted
service resumes latency samples, lost and duplicated counts and the sequences seen,
rather than starting blind (which would take the first canary after a restart for a
gap, or forget a repeat).

Verdicts go to the audit topic on the target, keyed by flow, topic, partition and
window, so a verdict written twice (a window judged again after a recovery that lost the
"judged" mark, or a MISSING window whose records came after all, now LATE) replaces the
earlier one rather than counting twice. Which windows are judged when is the pure
`core.record_audit.settle`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import faust

from mirrorline.core import record_audit as audit
from mirrorline.core.canary import (
    CanaryRecord,
    PartitionState,
    fold_arrival,
    new_partition_state,
)
from mirrorline.core.record_audit import Side, WindowVerdict
from mirrorline.core.settings import FlowSettings
from mirrorline.heartbeat.faust_plumbing import (
    DaemonWorker,
    faust_credentials,
    quiet_faust,
    slow_fetch_routine,
)
from mirrorline.kafka.admin import ClusterAdmin, TopicSpec
from mirrorline.runtime import stop_within

log = logging.getLogger(__name__)

#: Seconds between judging rounds, and between a reader's reports (`audit_reader`), for
#: the shortest windows; a twentieth of the window for longer ones, up to `TICK_MAX_S`.
#: Each round and each report is an event through the app's topic (a produce, a fetch, a
#: changelog write): at the floor's pace, an idle audit kept the heartbeat service at
#: about 10 % of a core. A verdict comes at most two cadences after its window's grace.
TICK_S = 0.5
TICK_MAX_S = 3.0


def cadence_s(window_ms: int) -> float:
    """Seconds between judging rounds (and reports) for windows of `window_ms`."""
    return min(TICK_MAX_S, max(TICK_S, window_ms / 20_000))


def until_due_s(cadence: float, now: float | None = None) -> float:
    """Seconds until the next report or judging round on a `cadence` grid of wall-clock
    time (multiples of the cadence since the epoch): more than 0, at most a cadence.
    Readers and judging rounds due together send their events together: they then share
    the app producer's requests, the agent's fetches and its changelog writes, where
    apart each cost a request of its own."""
    now = time.time() if now is None else now
    return cadence - now % cadence
#: How long the app's producer waits for more to send with what it has (faust's
#: `producer_linger`); readers and the agent wait for nothing it sends but verdicts.
PRODUCER_LINGER_S = 0.05
#: Seconds between commits of the app's consumer (faust's `broker_commit_interval`).
COMMIT_INTERVAL_S = 10.0
#: Longest wait for each step of stopping faust (it stops within a second normally);
#: the service's whole stop fits in `HeartbeatService.stop_budget_s`.
STOP_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class AuditTopics:
    events: str
    changelog: str
    results: str
    canary_changelog: str

    @classmethod
    def for_deployment(cls, deployment: str | None) -> AuditTopics:
        prefix = f"mirrorline-{deployment}" if deployment else "mirrorline"
        return cls(events=f"{prefix}-heartbeat-events.internal",
                   changelog=f"{prefix}-heartbeat-audit-changelog.internal",
                   results=f"{prefix}-audit.internal",
                   canary_changelog=f"{prefix}-heartbeat-canary-changelog.internal")


def verdict_key(flow: str, topic: str, partition: int, start: int) -> str:
    return f"{flow}|{topic}|{partition}|{start}"


def verdict_value(flow: str, topic: str, partition: int, start: int, window_ms: int,
                  verdict: WindowVerdict, judged_ms: int) -> dict[str, Any]:
    return {"flow": flow, "topic": topic, "partition": partition, "window_start_ms": start,
            "window_end_ms": start + window_ms, "verdict": verdict.verdict.value,
            "count": verdict.count, "source_count": verdict.source_count,
            "target_count": verdict.target_count, "reason": verdict.reason,
            "judged_ms": judged_ms}


def _part_key(flow: str, side: str, part: str) -> str:
    return f"{flow}|{side}|{part}"


class AuditApp:
    """The faust app of one target cluster and the flows into it."""

    def __init__(self, target: str, bootstrap: str, flows: Mapping[str, FlowSettings], *,
                 app_id: str, topics: AuditTopics, admin_kwargs: Mapping[str, Any],
                 on_verdict: Callable[[str, dict[str, Any]], None],
                 since_ms: int | None = None,
                 client_kwargs: Mapping[str, Any] | None = None) -> None:
        self.target = target
        #: Audit windows from the first whole one after this time (on the very first start;
        #: later starts keep the recorded first window).
        self.since_ms = int(time.time() * 1000) if since_ms is None else since_ms
        self.flows = dict(flows)
        self.topics = topics
        self._admin_kwargs = dict(admin_kwargs)
        self._on_verdict = on_verdict
        brokers = [f"kafka://{b.strip()}" for b in bootstrap.split(",") if b.strip()]
        #: Faust makes a data directory even for in-memory tables (`<app id>-data` in the
        #: working directory by default: a read-only root in a container, litter in a
        #: checkout). The tables live in memory and in their changelogs, so a private
        #: temporary directory, removed at stop, is all it gets.
        self._datadir = tempfile.mkdtemp(prefix=f"mirrorline-faust-{target}-")
        self.app = faust.App(
            app_id, broker=brokers, web_enabled=False, store="memory://",
            datadir=self._datadir,
            topic_partitions=1, producer_acks=-1, broker_session_timeout=6.0,
            broker_heartbeat_interval=2.0, stream_wait_empty=False,
            # Offsets of the events topic are committed every 10 s, not faust's 2.8 s:
            # events replayed after a crash change nothing (the table's positions), so a
            # longer interval costs no correctness, only requests saved.
            broker_commit_interval=COMMIT_INTERVAL_S,
            # Events due together (`until_due_s`) and the changelog writes of applying
            # them go out in one request rather than one each.
            producer_linger=PRODUCER_LINGER_S,
            table_cleanup_interval=3600.0, autodiscover=False,
            broker_credentials=faust_credentials(client_kwargs or {}))
        self._events = self.app.topic(topics.events, value_serializer="json", partitions=1)
        self._results = self.app.topic(topics.results, key_serializer="raw",
                                       value_serializer="json", partitions=1)
        # A changelog is read by the table's recovery, never by a stream, so it must not
        # count as a topic whose offsets a stream acknowledges (`acks=False`, as faust's
        # own changelogs): else faust's livelock check finds the table's own writes
        # "unprocessed" and, from `stream_processing_timeout` (5 min) after start, logs
        # "Stream has not started processing TP(...-changelog...)" at ERROR every 7 s.
        changelog = self.app.topic(topics.changelog, partitions=1, compacting=True,
                                   deleting=False, key_serializer="json",
                                   value_serializer="json", acks=False)
        self.table = self.app.Table("audit", default=None, partitions=1,
                                    changelog_topic=changelog)
        canary_changelog = self.app.topic(topics.canary_changelog, partitions=1,
                                          compacting=True, deleting=False,
                                          key_serializer="json", value_serializer="json",
                                          acks=False)
        self.canary_table = self.app.Table("canary", default=None, partitions=1,
                                           changelog_topic=canary_changelog)
        self.app.agent(self._events, name=f"audit-{target}")(self._fold)
        self.started = False
        self._starting: asyncio.Task[None] | None = None
        self._ticker: asyncio.Task[None] | None = None
        #: Resolved (and replaced) each time the agent has applied an event: what a
        #: reader waiting for its event to be applied awaits (`wait_applied`).
        self._change: asyncio.Future[None] | None = None

    async def create_topics(self) -> None:
        """Create the app's topics ourselves (one partition each) before faust starts, so
        no broker auto-creates them with its default partition count."""
        admin = ClusterAdmin(self.target, self._admin_kwargs)
        await asyncio.wait_for(admin.start(), 15)
        try:
            for spec in (TopicSpec(self.topics.events, 1, -1, {"retention.ms": "3600000"}),
                         TopicSpec(self.topics.changelog, 1, -1, {"cleanup.policy": "compact"}),
                         TopicSpec(self.topics.results, 1, -1, {"cleanup.policy": "compact"}),
                         TopicSpec(self.topics.canary_changelog, 1, -1,
                                   {"cleanup.policy": "compact"})):
                await admin.ensure_topic(spec)
        finally:
            await admin.close()

    async def start(self) -> None:
        await self.create_topics()
        self.app.finalize()
        # Faust's start runs in a task of its own: interrupting it halfway (SIGTERM during the
        # group join) leaves services behind that keep the process from exiting, so a stop
        # lets it finish (bounded) and then stops the app properly.
        consumer_thread = getattr(self.app.consumer, "_thread", None)
        if consumer_thread is not None:
            consumer_thread.Worker = DaemonWorker
        self._starting = asyncio.create_task(self.app.start(), name=f"faust {self.target}")
        await asyncio.shield(self._starting)
        slow_fetch_routine(consumer_thread)
        self.started = True
        self._ticker = asyncio.create_task(self._tick(), name=f"audit ticks {self.target}")
        for name, flow in list(self.flows.items()):
            await self.add_flow(name, flow)

    async def add_flow(self, name: str, flow: FlowSettings, since_ms: int | None = None
                       ) -> None:
        """Audit `name` too: windows from the first whole one after `since_ms` (default:
        the app's), unless the table already records where this flow's audit began."""
        self.flows[name] = flow
        since = self.since_ms if since_ms is None else since_ms
        first = audit.window_start(since, flow.audit.window_ms) + flow.audit.window_ms
        await self.send({"kind": "init", "flow": name, "start": first})

    async def stop(self) -> None:
        """Stop the app in whatever state it is, and leave nothing that holds the process.

        Faust runs its Kafka consumer in a thread of its own (mode's `ServiceThread`). A
        start cut short, or a stop that overran, used to leave that thread and its event
        loop running, and the process then never exited. So an unfinished start is
        cancelled, faust's own stop runs (bounded), and the consumer thread is then told
        to stop and awaited (bounded). Should it still hang on a cluster that does not
        answer, it is a daemon thread (see `start`) and ends with the process; faust's
        remains are then silenced after one line saying why.
        """
        try:
            await self._stop()
        finally:
            shutil.rmtree(self._datadir, ignore_errors=True)

    async def _stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
        starting, self._starting, self.started = self._starting, None, False
        if starting is None:
            return
        if not starting.done():
            starting.cancel()
            await asyncio.wait({starting}, timeout=STOP_TIMEOUT_S)
        if not await stop_within(self.app.stop(), STOP_TIMEOUT_S,
                                 f"stopping the faust app of {self.target!r}"):
            quiet_faust()
        if not await self._end_consumer_thread():
            log.warning("audit %s: faust's consumer thread did not stop within %.0fs (cluster "
                        "%r does not answer); not waiting for it", self.target,
                        STOP_TIMEOUT_S, self.target)
            quiet_faust()

    async def _end_consumer_thread(self) -> bool:
        """Tell faust's consumer thread to stop and wait for it; False if it did not."""
        consumer = getattr(self.app, "_consumer", None)
        service = getattr(consumer, "_thread", None)
        worker = getattr(service, "_thread", None)
        if service is None or worker is None:
            return True
        with contextlib.suppress(RuntimeError):  # its loop closed already: it is ending
            service.thread_loop.call_soon_threadsafe(service._stopped.set)
        for _ in range(int(STOP_TIMEOUT_S / 0.05)):  # a thread's end cannot be awaited
            if not worker.is_alive():
                return True
            await asyncio.sleep(0.05)
        return not worker.is_alive()

    async def send(self, event: dict[str, Any]) -> None:
        await self._events.send(value=event)

    async def _tick(self) -> None:
        """A judging round every cadence -- while a window waits to be judged: with none
        open or held anywhere (an idle mirror), a round would judge nothing, and each is
        an event through the app's topic."""
        while True:
            windows = [f.audit.window_ms for f in self.flows.values() if f.audit.enabled]
            await asyncio.sleep(until_due_s(cadence_s(min(windows, default=0))))
            if self._anything_open():
                await self.send({"kind": "tick"})

    def _anything_open(self) -> bool:
        """Whether any side of any partition holds a window not judged for good."""
        return any(isinstance(v, dict) and (v.get("windows") or v.get("held"))
                   for v in list(self.table.values()))

    def settled(self, flow: str, part: str) -> bool:
        """Both sides of the flow's partition `part` are in the table with no window open
        or held: a report that only says a side is still caught up would change nothing
        that is ever judged (a window becomes judgeable only by records folded into it,
        and the reports that fold them carry the time again)."""
        for side in ("source", "target"):
            state = self.table.get(_part_key(flow, side, part))
            if not isinstance(state, dict) or state.get("windows") or state.get("held"):
                return False
        return True

    async def wait_applied(self, done: Callable[[], bool], timeout: float) -> bool:
        """Wait until `done()` holds, looking again each time the agent has applied an
        event (and at least once a second); False if it does not within `timeout`
        seconds. Readers wait here for their own event rather than polling the table."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not done():
            left = deadline - loop.time()
            if left <= 0:
                return False
            if self._change is None or self._change.done():
                self._change = loop.create_future()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._change), min(left, 1.0))
        return True

    def _applied(self) -> None:
        change, self._change = self._change, None
        if change is not None and not change.done():
            change.set_result(None)

    # -- what readers ask of the table (reading is allowed outside the agent) -------------
    def first_window(self, flow: str) -> int | None:
        value = self.table.get(f"start|{flow}")
        return None if value is None else int(value)

    def position(self, flow: str, side: str, part: str) -> int | None:
        state = self.table.get(_part_key(flow, side, part))
        return None if state is None else int(state["next"])

    def tokens(self, flow: str, side: str, part: str) -> dict[str, dict[str, int]]:
        """The keys of batches `side` folded whole per open window (`core.batch_audit`)."""
        state = self.table.get(_part_key(flow, side, part))
        found = None if state is None else state.get("b")
        return found if isinstance(found, dict) else {}

    def late(self, flow: str) -> int:
        prefix = f"{flow}|"
        return sum(int(v["late"]) for k, v in list(self.table.items())
                   if isinstance(k, str) and k.startswith(prefix) and isinstance(v, dict))

    def canary_state(self, flow: str, partition: int) -> PartitionState | None:
        state = self.canary_table.get(f"{flow}|{partition}")
        return state if isinstance(state, dict) else None

    def canary_states(self, flow: str) -> dict[int, PartitionState]:
        prefix = f"{flow}|"
        return {int(k[len(prefix):]): v for k, v in list(self.canary_table.items())
                if isinstance(k, str) and k.startswith(prefix) and isinstance(v, dict)}

    # -- the agent ----------------------------------------------------------------------
    async def _fold(self, stream: Any) -> None:
        async for event in stream:
            try:
                await self._apply(event)
            except Exception:  # a bad event must not stop the audit
                log.exception("audit %s: skipping event %r", self.target,
                              json.dumps(event)[:200])
            finally:
                self._applied()

    async def _apply(self, event: Mapping[str, Any]) -> None:
        kind = event.get("kind")
        if kind == "init":
            key = f"start|{event['flow']}"
            if self.table.get(key) is None:
                self.table[key] = int(event["start"])
        elif kind == "fold":
            self._fold_parts(event)
        elif kind == "tick":
            await self._judge()
        elif kind == "canaries":
            for partition, data in event["parts"].items():
                self._fold_canary(str(event["flow"]), int(partition), data,
                                  int(event["window"]))
        elif kind == "canary":  # one partition's, as readers reported before "canaries"
            self._fold_canary(str(event["flow"]), int(event["partition"]), event,
                              int(event["window"]))

    def _fold_canary(self, flow: str, partition: int, data: Mapping[str, Any],
                     window_ms: int) -> None:
        key = f"{flow}|{partition}"
        state = self.canary_table.get(key)
        if state is None:
            state = new_partition_state(int(data["from"]))
        elif int(state["next"]) != int(data["from"]):
            return  # stale or replayed: the reader re-reads from state["next"]
        for session, sequence, sent_ms, *arrived in data["records"]:
            # Each canary's own arrival time; events written before readers reported
            # several arrivals at once carry one for all.
            at = int(arrived[0]) if arrived else int(data["at"])
            anomaly = fold_arrival(state, CanaryRecord(int(session), partition, int(sequence),
                                                       int(sent_ms)),
                                   at, window_ms=window_ms, since_ms=int(data["since"]))
            if anomaly:
                log.warning("canary %s: %s", flow, anomaly)
        state["next"] = int(data["to"])
        self.canary_table[key] = state

    def _fold_parts(self, event: Mapping[str, Any]) -> None:
        flow, side = str(event["flow"]), str(event["side"])
        first = self.first_window(flow)
        if first is None:
            return
        for part, data in event["parts"].items():
            key = _part_key(flow, side, part)
            state = self.table.get(key)
            if state is None:
                state = Side.new(int(data["from"]), first)
            elif int(state["next"]) != int(data["from"]):
                continue  # stale or replayed: the reader re-reads from state["next"]
            Side.fold(state, data["d"], int(data["to"]), int(data["caught"]),
                      int(data.get("late", 0)), int(data.get("truncated", -1)),
                      int(data.get("top", -1)), data.get("b"))
            self.table[key] = state

    async def _judge(self) -> None:
        now = int(time.time() * 1000)
        prefix_len = {}
        for key in [k for k in list(self.table.keys()) if isinstance(k, str)]:
            flow, _, rest = key.partition("|")
            side, _, part = rest.partition("|")
            if side != "source" or flow not in self.flows:
                continue
            prefix_len[(flow, part)] = True
        for flow_name, part in prefix_len:
            settings = self.flows[flow_name].audit
            source = self.table.get(_part_key(flow_name, "source", part))
            target = self.table.get(_part_key(flow_name, "target", part))
            if source is None or target is None:
                continue
            held = {k: list(v) for k, v in source.get("held", {}).items()}
            due = audit.settle(source, target, now, window_ms=settings.window_ms,
                               grace_ms=settings.grace_ms,
                               missing_after_ms=settings.missing_after_ms)
            if not due and source["held"] == held:
                continue
            topic, _, partition = part.rpartition("|")
            for start, verdict in due:
                key = verdict_key(flow_name, topic, int(partition), start)
                value = verdict_value(flow_name, topic, int(partition), start,
                                      settings.window_ms, verdict, now)
                await self._results.send(key=key.encode(), value=value)
                self._on_verdict(key, value)
            self.table[_part_key(flow_name, "source", part)] = source
            self.table[_part_key(flow_name, "target", part)] = target
