"""The executor's acknowledgement channel (issue 19): only the running query's messages,
only for the partitions it copies, are recorded.

The executor's `ExecutorQuery` runs in this process with a real flow (clients,
bookkeeping) on two real brokers, and messages arrive on its real Unix socket framed as the
sink's commit frames them (`mirrorline_spark.acks`). Spark itself is stood in for: the
test sets the query's secret and partitions as starting a query sets them
(`ExecutorQuery._start_query`); with Spark, `test_spark_run.py` checks a forged message
without the secret end to end.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import secrets
from pathlib import Path

import pytest
from helpers import consume_all, create_topic
from mirrorline_spark.acks import PartitionAcks, decode_length, encode
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
    """A message with the query's secret but of a partition the query does not copy, or
    to another remote topic, or any message once no query runs, is refused with one
    WARNING and records nothing: no progress, no offset sync. The query's own message for
    its partition is recorded."""
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
        # What starting a query does: its partitions, its feeds, its secret.
        run.running = {(topic, 0): remote}
        query._feeds = [run.name]
        secret = query._acks.secret = secrets.token_urlsafe(32)
        path = query._acks.path

        async def send(acks: list[PartitionAcks], key: str) -> None:
            """The sink's message, framed here so that it reads the same to any executor."""
            reader, writer = await asyncio.open_unix_connection(path)
            writer.write(encode({"batch": 1, "secret": key,
                                 "acks": [dataclasses.asdict(x) for x in acks]}))
            await writer.drain()
            reply = json.loads(await reader.readexactly(
                decode_length(await reader.readexactly(4))))
            writer.close()
            if not reply.get("ok"):
                raise RuntimeError(reply.get("error", ""))

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
                await send(acks, secret)
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING
                    and "refused" in r.getMessage()]
        assert len(warnings) == len(forged), [r.getMessage() for r in warnings]
        assert not [r for r in warnings if secret in r.getMessage()]
        assert run.next_offsets == {} and run.replicated == {}
        # The query's own message is recorded.
        await send([PartitionAcks(topic, 0, remote, [(0, 3, 0)], flow=run.name)], secret)
        assert run.next_offsets == {(topic, 0): 3}
        # No query runs any more: even its secret counts for nothing.
        query._acks.secret = None
        with pytest.raises(RuntimeError, match="refused"):
            await send([PartitionAcks(topic, 0, remote, [(3, 2, 3)], flow=run.name)], secret)
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
