"""Contender: Mirrorline's Spark path, as an operator runs it -- a controller and a
`mirrorline spark-executor` (separate processes) with the flow on `mirrorline.executor =
spark`, so the query, its source and sink, and the same bookkeeping as the replicator
(progress, offset syncs, offset map) all run. Start-up (JVM, SparkSession, controller
grace, first micro-batch) is reported apart from the timed copy. Its CPU figure is the
controller's, the executor's and everything they start (Spark's JVM, its Python workers).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import sys
import time
from typing import Any

from bench.common import BenchEnv, Contender, ContenderUnavailable, ProcessCost, free_port


def config(env: BenchEnv) -> str:
    flow = f"{env.source_alias}->{env.target_alias}"
    return "\n".join([
        f"clusters = {env.source_alias}, {env.target_alias}",
        f"{env.source_alias}.bootstrap.servers = {env.source_bootstrap}",
        f"{env.target_alias}.bootstrap.servers = {env.target_bootstrap}",
        f"{flow}.enabled = true",
        f"{flow}.topics = {env.source_topic}",
        f"{flow}.mirrorline.executor = spark",
        *([f"{env.target_alias}.producer.compression.type = {env.codec}"]
          if env.codec != "none" else []),
        "replication.policy.class = IdentityReplicationPolicy",
        f"mirrorline.deployment = bench{secrets.token_hex(3)}",
        "",
    ])


def make(master: str, conf: tuple[str, ...] = ()) -> Contender:
    async def run(env: BenchEnv) -> float:
        try:
            import pyspark  # noqa: F401
        except ImportError as exc:
            raise ContenderUnavailable("pyspark is not installed (mirrorline[spark])") from exc
        path = env.workdir / "mm2.properties"
        await asyncio.to_thread(path.write_text, config(env))
        started = time.perf_counter()
        procs: list[tuple[Any, Any]] = []
        for name, args in (
                ("controller", ["controller", "--controller-id", "c", "--lease-ms", "2000"]),
                ("executor", ["spark-executor", "--executor-id", "bench", "--master", master,
                              "--spark-conf", "spark.ui.enabled=false",
                              *(a for c in conf for a in ("--spark-conf", c))])):
            log = await asyncio.to_thread(open, env.workdir / f"{name}.log", "wb")
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "mirrorline", *args, "--config", str(path),
                "--grpc-port", str(free_port()), "--metrics-port", "-1",
                stdout=log, stderr=log)
            procs.append((proc, log))
        waiters = [asyncio.ensure_future(p.wait()) for p, _ in procs]
        try:
            return await env.wait_mirrored(started, watch=waiters,
                                           limit=max(300.0, env.records / 1_000),
                                           cost=ProcessCost([p.pid for p, _ in procs]))
        finally:
            for proc, _ in reversed(procs):
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(proc.wait(), 30)
                    if proc.returncode is None:
                        proc.kill()
            await asyncio.gather(*waiters, return_exceptions=True)
            for _, log in procs:
                log.close()
    return run
