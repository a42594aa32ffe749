"""Contender: the Mirrorline replicator, as an operator runs it (`mirrorline replicator`).

A separate OS process with a generated MM2 properties file (identity policy, so the
remote topic is the harness's pre-created target topic), doing everything it does in
production: progress records, offset syncs, metrics, health.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time

from bench.common import BenchEnv, ProcessCost


def config(env: BenchEnv) -> str:
    return "\n".join([
        f"clusters = {env.source_alias}, {env.target_alias}",
        f"{env.source_alias}.bootstrap.servers = {env.source_bootstrap}",
        f"{env.target_alias}.bootstrap.servers = {env.target_bootstrap}",
        f"{env.source_alias}->{env.target_alias}.enabled = true",
        f"{env.source_alias}->{env.target_alias}.topics = {env.source_topic}",
        "replication.policy.class = IdentityReplicationPolicy",
        "",
    ])


async def run(env: BenchEnv) -> float:
    path = env.workdir / "mm2.properties"
    await asyncio.to_thread(path.write_text, config(env))
    log = await asyncio.to_thread(open, env.workdir / "replicator.log", "wb")
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mirrorline", "replicator", "--config", str(path),
        "--grpc-port", "0", "--metrics-port", "0", "--worker-id", "bench",
        stdout=log, stderr=log)
    waiter = asyncio.ensure_future(proc.wait())
    try:
        return await env.wait_mirrored(started, watch=[waiter], cost=ProcessCost([proc.pid]))
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 20)
            if proc.returncode is None:
                proc.kill()
        await asyncio.gather(waiter, return_exceptions=True)
        log.close()
