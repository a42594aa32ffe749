"""The executor's acknowledgement hand-over (issue 19): only the running query's
micro-batches, only for the partitions it copies, are recorded.

The executor's `ExecutorQuery` runs in this process with a real flow (clients,
bookkeeping) on two real brokers, and micro-batches arrive from another thread, as
PySpark's callback thread hands them over (`ExecutorQuery._from_spark`). Spark itself is
stood in for: the test sets the query's number and partitions as starting a query sets
them (`ExecutorQuery._start_query`); `test_spark.py` runs the hand-over with Spark.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from pathlib import Path

import pytest
from helpers import consume_all, create_topic
from mirrorline_spark.acks import PartitionAcks
from mirrorline_spark.executor.driver import SparkDriver
from mirrorline_spark.executor.flowrun import FlowRun
from mirrorline_spark.executor.holds import Holds
from mirrorline_spark.executor.query import ExecutorQuery
from opentelemetry.sdk.metrics import MeterProvider
from procs import QUIET_SHARED_CLUSTERS, mm2_config

from mirrorline.core.config import parse_config
from mirrorline.core.wire import OffsetSync
from mirrorline.dev.brokers import LocalBroker
from mirrorline.telemetry.replication import ReplicationMetrics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_acknowledgements_of_partitions_the_query_does_not_copy_are_refused(
        primary: LocalBroker, backup: LocalBroker, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """A micro-batch of the running query but of a partition it does not copy, or to
    another remote topic, is refused with one WARNING, as is one of an earlier query or
    any once no query runs, and records nothing: no progress, no offset sync. The query's
    own micro-batch for its partition is recorded."""
    tag = secrets.token_hex(3)
    a, b, topic = f"a{tag}", f"b{tag}", f"acks{tag}"
    await create_topic(primary.bootstrap, topic, 2)
    settings = parse_config(mm2_config(
        {a: primary, b: backup}, {f"{a}->{b}": {"topics": topic, "offset.lag.max": "0"}},
        **QUIET_SHARED_CLUSTERS)).flows[f"{a}->{b}"]
    run = FlowRun(settings, metrics=ReplicationMetrics(MeterProvider().get_meter("t")),
                  worker_id="spark:t")
    await run.open()
    assert run.books is not None
    runs = {run.name: run}
    query = ExecutorQuery(SparkDriver("local[1]", {}, "t"), runs, worker_id="spark:t",
                          workdir=str(tmp_path), holds=Holds())
    await query.start()
    try:
        remote = f"{a}.{topic}"
        # What starting a query does: its partitions, its feeds, its number.
        run.running = {(topic, 0): remote}
        query._feeds = [run.name]
        live = query._live = 7
        loop = asyncio.get_running_loop()

        async def send(acks: list[PartitionAcks], number: int) -> None:
            """A micro-batch of query `number`, handed over from a thread as Spark's is."""
            await asyncio.to_thread(query._from_spark, loop, number, 1, acks)

        caplog.set_level(logging.WARNING)
        forged = [
            [PartitionAcks(topic, 1, remote, [(0, 5, 9000)], flow=run.name)],  # not copied
            [PartitionAcks(topic, 0, "elsewhere", [(0, 5, 9000)], flow=run.name)],
            [PartitionAcks(topic, 0, remote, [(0, 5, 9000)], flow=run.name),  # one bad
             PartitionAcks(topic, 1, remote, [(0, 5, 9000)], flow=run.name)],
            [PartitionAcks(topic, 0, remote, [(0, 5, 9000)], flow="x->y")],
        ]
        for acks in forged:
            with pytest.raises(RuntimeError, match="refused"):
                await send(acks, live)
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING
                    and "refused" in r.getMessage()]
        assert len(warnings) == len(forged), [r.getMessage() for r in warnings]
        assert run.next_offsets == {} and run.replicated == {}
        # The query's own message is recorded.
        await send([PartitionAcks(topic, 0, remote, [(0, 3, 0)], flow=run.name)], live)
        assert run.next_offsets == {(topic, 0): 3}
        # A late micro-batch of an earlier query is refused, whatever it names.
        with pytest.raises(RuntimeError, match="refused"):
            await send([PartitionAcks(topic, 0, remote, [(3, 2, 3)], flow=run.name)], live - 1)
        # No query runs any more: even its own micro-batch counts for nothing.
        query._live = None
        with pytest.raises(RuntimeError, match="refused"):
            await send([PartitionAcks(topic, 0, remote, [(3, 2, 3)], flow=run.name)], live)
        await run.books.flush()
        saved = await run.books.progress.load()
        assert {k: v for k, v in saved.items() if k[0] == topic} == {(topic, 0): 3}
        syncs = await consume_all(primary.bootstrap, f"mm2-offset-syncs.{b}.internal")
        mine = [OffsetSync.decode(r.key, r.value) for rs in syncs.values() for r in rs]
        mine = [s for s in mine if s.topic == topic]
        assert mine and all(s.partition == 0 and s.downstream_offset < 3 for s in mine), mine
    finally:
        await query.stop(drain=False)
        await run.close()
        await query._driver.stop()
