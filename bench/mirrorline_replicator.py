"""Contender: the Mirrorline replicator, as an operator runs it (`mirrorline replicator`).

A separate OS process with a generated MM2 properties file (identity policy, so the
remote topic is the harness's pre-created target topic), doing everything it does in
production: progress records, offset syncs, metrics, health. Two contenders in one run:
`make("on")` copies the source's record batches as they are wherever the target takes
them (`mirrorline.batch.path = on`, docs/batch-path.md), `make("off")` decodes and
re-batches every record (the record path). On a compressed source topic the target's
producer compresses with the source's codec (`<target>.producer.compression.type`), as an
operator mirroring such a topic would set it: the record path compresses again what it
re-batches; the batch path keeps the source's compressed batches and uses the setting
only for batches it sends the record path's way. After the copy the replicator's own
status says which path each partition took and why (`copy_path`, `copy_path_reason` of
GetStatus); the bench prints it beside the figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from typing import Literal

import grpc

from bench.common import BenchEnv, Contender, ProcessCost, free_port
from mirrorline.v1 import replicator_pb2, replicator_pb2_grpc


def config(env: BenchEnv, batch_path: Literal["auto", "on", "off"] = "auto") -> str:
    flow = f"{env.source_alias}->{env.target_alias}"
    return "\n".join([
        f"clusters = {env.source_alias}, {env.target_alias}",
        f"{env.source_alias}.bootstrap.servers = {env.source_bootstrap}",
        f"{env.target_alias}.bootstrap.servers = {env.target_bootstrap}",
        f"{flow}.enabled = true",
        f"{flow}.topics = {env.source_topic}",
        f"{flow}.mirrorline.batch.path = {batch_path}",
        *([f"{env.target_alias}.producer.compression.type = {env.codec}"]
          if env.codec != "none" else []),
        "replication.policy.class = IdentityReplicationPolicy",
        "",
    ])


def make(batch_path: Literal["auto", "on", "off"]) -> Contender:
    """The replicator with `mirrorline.batch.path = batch_path`."""
    async def contender(env: BenchEnv) -> float:
        return await run(env, batch_path)
    return contender


async def run(env: BenchEnv, batch_path: Literal["auto", "on", "off"] = "auto") -> float:
    path = env.workdir / "mm2.properties"
    await asyncio.to_thread(path.write_text, config(env, batch_path))
    log = await asyncio.to_thread(open, env.workdir / "replicator.log", "wb")
    port = free_port()
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mirrorline", "replicator", "--config", str(path),
        "--grpc-port", str(port), "--metrics-port", "0", "--worker-id", "bench",
        stdout=log, stderr=log)
    waiter = asyncio.ensure_future(proc.wait())
    try:
        seconds = await env.wait_mirrored(started, watch=[waiter], cost=ProcessCost([proc.pid]))
        env.copy_paths.append(await copy_paths(port, env.source_topic))
        return seconds
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 20)
            if proc.returncode is None:
                proc.kill()
        await asyncio.gather(waiter, return_exceptions=True)
        log.close()


async def copy_paths(port: int, topic: str) -> str:
    """Which path the replicator says each partition of `topic` took, and why, in short:
    e.g. "batches x4" or "records x3 (reason), batches x1"."""
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            status = await replicator_pb2_grpc.ReplicatorStub(channel).GetStatus(
                replicator_pb2.GetReplicatorStatusRequest(), timeout=10)
    except grpc.aio.AioRpcError as exc:
        return f"unknown (GetStatus: {exc.code().name})"
    seen: dict[str, int] = {}
    for part in status.partitions:
        if part.source_topic == topic:
            said = part.copy_path or "not reported"
            if part.copy_path_reason:
                said += f" ({part.copy_path_reason})"
            seen[said] = seen.get(said, 0) + 1
    return ", ".join(f"{said} x{count}" for said, count in seen.items()) or "no partition"
