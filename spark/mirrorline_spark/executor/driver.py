"""The Spark driver inside the executor service: one SparkSession, streaming queries.

PySpark's driver API blocks (py4j calls into the JVM), so every call runs on one
dedicated thread (`spark-driver`), never on the event loop. One thread rather than a
pool because PySpark pins JVM state such as the active session to the calling thread.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from mirrorline_spark.sink import HandOver

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: JVM options of the driver unless `--spark-conf spark.driver.extraJavaOptions=...` is given.
DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:MetaspaceSize=256m"
#: A folder on the PYTHONPATH of Spark's Python workers (`workerpath/sitecustomize.py`).
WORKER_PATH = str(Path(__file__).resolve().parent.parent / "workerpath")
#: Pause between micro-batches when there is nothing to copy.
TRIGGER = "200 milliseconds"


@dataclass
class QueryStatus:
    active: bool
    error: str | None
    #: Duration of the last micro-batch (ms) and its input rows.
    batch_ms: float
    input_rows: int
    #: (feed, topic, partition) -> latest source offset the source reported (its log end).
    latest: dict[tuple[int, str, int], int]


class SparkDriver:
    def __init__(self, master: str, conf: Mapping[str, str], app_name: str) -> None:
        self.master = master
        self.conf = dict(conf)
        self.app_name = app_name
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spark-driver")
        self._spark: Any = None
        self.ui_address = ""

    async def call(self, fn: Callable[[], _T]) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn)

    async def start(self) -> None:
        started = time.monotonic()
        await self.call(self._start)
        from mirrorline_spark.executor.preflight import security_summary

        log.info("Spark session on %s ready in %.1fs (%s; UI %s)", self.master,
                 time.monotonic() - started, security_summary(self.conf),
                 self.ui_address or "off")

    def _start(self) -> None:
        # Spark's Python workers must run this interpreter: it has mirrorline installed.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        if self.conf.get("spark.ui.enabled", "true").strip().lower() == "true":
            # Spark's web UI listens on SPARK_LOCAL_IP, else on every interface; it has no
            # authentication, so loopback unless the operator's environment says otherwise.
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Spark's Python workers import PySpark's compiled modules, not its zip: they
        # inherit this PYTHONPATH through the driver JVM (workerpath/sitecustomize.py).
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if WORKER_PATH not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([*paths, WORKER_PATH])
        from pyspark.sql import SparkSession

        from mirrorline_spark.executor.classdata import driver_java_options
        from mirrorline_spark.source import KafkaDataSource

        builder = SparkSession.builder.master(self.master).appName(self.app_name)
        # The driver JVM compiles with C1 only and collects with the serial GC: on a small
        # machine C2's compiler threads and G1's background threads compete with the
        # copying for the cores during start-up and the first micro-batches (measured: a
        # faster start and no loss of throughput, see docs/spark.md). Its first full
        # collection for class metadata comes at 256 MB rather than 21 MB: a session and
        # its first micro-batches load about 19 000 classes, and that collection (0.15 s
        # of a core, 5 classes unloaded) fell amid the first micro-batches' copying. The
        # executors of a cluster keep the JVM's defaults.
        # With a class-data archive made for this Java and PySpark (classdata.py), the
        # driver maps its classes from it: about half the CPU of a start.
        # Task workers are forked with their modules already imported (workerdaemon.py).
        defaults = {"spark.driver.extraJavaOptions": driver_java_options(DRIVER_JAVA_OPTIONS),
                    "spark.python.daemon.module": "mirrorline_spark.workerdaemon",
                    "spark.sql.shuffle.partitions": "4",
                    "spark.sql.streaming.stopTimeout": "10000",
                    "spark.ui.showConsoleProgress": "false"}
        for key, value in {**defaults, **self.conf}.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
        spark.dataSource.register(KafkaDataSource)
        self._spark = spark
        self.ui_address = spark.sparkContext.uiWebUrl or ""

    async def stop(self) -> None:
        if self._spark is not None:
            spark, self._spark = self._spark, None
            try:
                await asyncio.wait_for(self.call(spark.stop), 15.0)
            except TimeoutError:
                log.warning("Spark did not stop within 15s; leaving it to process exit")
        self._thread.shutdown(wait=False, cancel_futures=True)

    # -- queries ------------------------------------------------------------------------
    async def start_query(self, name: str, source: Mapping[str, str],
                          sink: Mapping[str, str], commit: HandOver) -> RunningQuery:
        """Start query `name` reading with the `source` options; `commit` gets each
        micro-batch's acknowledgements, on PySpark's callback thread
        (`mirrorline_spark.sink.micro_batch_commit`)."""
        checkpoint = tempfile.mkdtemp(prefix=f"mirrorline-spark-{name}-")
        _CHECKPOINTS.add(checkpoint)

        def run() -> Any:
            from mirrorline_spark import FORMAT
            from mirrorline_spark.sink import micro_batch_commit

            reader = self._spark.readStream.format(FORMAT)
            # As many copying tasks per feed as Spark runs at once: a task per Kafka
            # partition would pay a task's fixed costs for each (copytask.py).
            tasks = {"readTasks": str(self._spark.sparkContext.defaultParallelism)}
            for key, value in {**tasks, **source}.items():
                reader = reader.option(key, value)
            writer = reader.load().writeStream.foreachBatch(micro_batch_commit(sink, commit)) \
                .queryName(name)
            # The checkpoint is a cache Spark needs; the truth is the durable progress
            # the start offsets came from, so every query starts from a fresh directory.
            return writer.option("checkpointLocation", checkpoint) \
                .trigger(processingTime=TRIGGER).start()

        query = await self.call(run)
        return RunningQuery(self, query, checkpoint)


class RunningQuery:
    def __init__(self, driver: SparkDriver, query: Any, checkpoint: str) -> None:
        self._driver = driver
        self._query = query
        self.checkpoint = checkpoint

    async def status(self) -> QueryStatus:
        return await self._driver.call(self._status)

    def _status(self) -> QueryStatus:
        q = self._query
        error = q.exception()
        progress = q.lastProgress or {}
        latest: dict[tuple[int, str, int], int] = {}
        for source in progress.get("sources", []):
            # Python data sources report latestOffset as the JSON text "null": fall back
            # to the end the last micro-batch planned.
            raw = _offsets(source.get("latestOffset")) or _offsets(source.get("endOffset"))
            if raw:
                from mirrorline_spark.options import parse_offset_key

                for key, value in raw.items():
                    latest[parse_offset_key(key)] = int(value)
        durations = progress.get("durationMs", {})
        return QueryStatus(active=bool(q.isActive),
                           error=None if error is None else str(error.desc
                                                                if hasattr(error, "desc")
                                                                else error),
                           batch_ms=float(durations.get("triggerExecution", 0.0)),
                           input_rows=int(progress.get("numInputRows", 0)), latest=latest)

    async def trigger_active(self) -> bool:
        return await self._driver.call(
            lambda: bool(self._query.isActive and self._query.status.get("isTriggerActive")))

    async def stop(self) -> None:
        try:
            await self._driver.call(self._query.stop)
        finally:
            shutil.rmtree(self.checkpoint, ignore_errors=True)
            _CHECKPOINTS.discard(self.checkpoint)


#: Checkpoint folders of queries not stopped yet: removed at exit, should the process end
#: before their queries stop (a stop that overran its budget).
_CHECKPOINTS: set[str] = set()


@atexit.register
def _remove_checkpoints() -> None:
    for path in list(_CHECKPOINTS):
        shutil.rmtree(path, ignore_errors=True)


def _offsets(raw: Any) -> dict[str, Any] | None:
    """A progress report's offsets (a dict, or JSON text of one); None otherwise."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    return raw if isinstance(raw, dict) else None
