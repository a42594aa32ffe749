"""Run Mirrorline services as real OS processes in tests, and talk to them over gRPC.

Tests start `python -m mirrorline <service>` exactly as `mirrorline run` does, pick free
ports, and use the standard gRPC health service to know when the service is serving.
Import as `from procs import ...` (tests/ is on sys.path through conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mirrorline import grpcsecure
from mirrorline.dev.brokers import LocalBroker
from mirrorline.grpcsecure import ClientCredentials
from mirrorline.v1 import admin_pb2, admin_pb2_grpc, flows_pb2, replicator_pb2, replicator_pb2_grpc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


#: Top-level keys for a `mirrorline run` on the session's shared clusters: its heartbeat
#: service would otherwise write fixed-name topics (`heartbeats` on every cluster of the
#: file, `mirrorline-canary`) that every other test's flows then mirror, heartbeats and
#: canaries bypassing topic filters.
QUIET_SHARED_CLUSTERS: Mapping[str, str] = {
    "emit_heartbeats_enabled": "false", "canary_enabled": "false", "audit_enabled": "false"}


def mm2_config(clusters: Mapping[str, LocalBroker | str], flows: Mapping[str, Mapping[str, str]],
               **top: str) -> str:
    """An MM2 properties file: `flows` maps "a->b" to that flow's keys (enabled is implied)."""
    lines = [f"clusters = {', '.join(clusters)}"]
    for alias, broker in clusters.items():
        bootstrap = broker if isinstance(broker, str) else broker.bootstrap
        lines.append(f"{alias}.bootstrap.servers = {bootstrap}")
    for key, value in top.items():
        lines.append(f"{key.replace('_', '.')} = {value}")
    for flow, props in flows.items():
        lines.append(f"{flow}.enabled = true")
        lines.extend(f"{flow}.{k} = {v}" for k, v in props.items())
    return "\n".join(lines) + "\n"


class ServiceProcess:
    """One `python -m mirrorline <args>` child with a gRPC port."""

    def __init__(self, args: list[str], *, grpc_port: int, log_path: Path,
                 metrics_port: int | None = None,
                 credentials: ClientCredentials | None = None,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None) -> None:
        self.args = args
        #: Its working directory (the tests' own when None).
        self.cwd = cwd
        #: Extra environment (e.g. an OTLP endpoint); none is inherited from the tests'.
        self.env = dict(env or {})
        #: How the test talks to it (plaintext when None).
        self.credentials = credentials or ClientCredentials()
        self.grpc_port = grpc_port
        self.metrics_port = metrics_port
        self.log_path = log_path
        self.proc: asyncio.subprocess.Process | None = None
        self._channel: grpc.aio.Channel | None = None

    async def start(self) -> None:
        log = self.log_path.open("ab")
        env = {k: v for k, v in os.environ.items() if k != "OTEL_EXPORTER_OTLP_ENDPOINT"}
        env.update(self.env)
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mirrorline", *self.args, stdout=log, stderr=log, env=env,
            cwd=self.cwd)
        log.close()

    @property
    def channel(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = grpcsecure.channel(f"127.0.0.1:{self.grpc_port}", self.credentials)
        return self._channel

    async def health(self) -> int | None:
        """The overall health status, or None while the server does not answer."""
        stub = health_pb2_grpc.HealthStub(self.channel)
        try:
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
        except grpc.aio.AioRpcError:
            return None
        status: int = reply.status
        return status

    async def wait_serving(self, timeout: float = 30.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while await self.health() != health_pb2.HealthCheckResponse.SERVING:
            self._check_alive()
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"{self.args[0]} not SERVING after {timeout}s; log:\n"
                                     + self.log_tail())
            await asyncio.sleep(0.2)

    async def replicator_status(self) -> replicator_pb2.ReplicatorStatus:
        stub = replicator_pb2_grpc.ReplicatorStub(self.channel)
        status: replicator_pb2.ReplicatorStatus = await stub.GetStatus(
            replicator_pb2.GetReplicatorStatusRequest(), timeout=5)
        return status

    def _check_alive(self) -> None:
        if self.proc is not None and self.proc.returncode is not None:
            raise AssertionError(f"{self.args[0]} exited with {self.proc.returncode}; log:\n"
                                 + self.log_tail())

    async def scrape(self) -> str:
        """The service's Prometheus exposition text."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.metrics_port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
        await writer.drain()
        response = await reader.read()
        writer.close()
        return response.split(b"\r\n\r\n", 1)[1].decode()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    async def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(sig)

    async def wait(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        return await asyncio.wait_for(self.proc.wait(), timeout)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 15)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


@contextlib.asynccontextmanager
async def _standalone(service: str, id_flag: str, config: str, tmp: Path, name: str,
                      extra: list[str] | None, serving: bool) -> AsyncIterator[ServiceProcess]:
    """A running `mirrorline <service>` with flows from `config` (no controller)."""
    path = tmp / f"{name}.properties"
    path.write_text(config)
    port, metrics = free_port(), free_port()
    proc = ServiceProcess(
        [service, "--config", str(path), "--grpc-port", str(port), "--metrics-port",
         str(metrics), id_flag, name, *(extra or [])],
        grpc_port=port, log_path=tmp / f"{name}.log", metrics_port=metrics)
    await proc.start()
    try:
        if serving:
            await proc.wait_serving()
        yield proc
    finally:
        await proc.close()


def replicator(config: str, tmp: Path, *, name: str = "replicator",
               extra: list[str] | None = None, serving: bool = True
               ) -> contextlib.AbstractAsyncContextManager[ServiceProcess]:
    """A running standalone `mirrorline replicator` (waits for SERVING unless told not to)."""
    return _standalone("replicator", "--worker-id", config, tmp, name, extra, serving)


def checkpointer(config: str, tmp: Path, *, name: str = "checkpointer",
                 extra: list[str] | None = None, serving: bool = True
                 ) -> contextlib.AbstractAsyncContextManager[ServiceProcess]:
    """A running `mirrorline checkpointer` for the flows of `config`."""
    return _standalone("checkpointer", "--instance-id", config, tmp, name, extra, serving)


def config_for(primary: LocalBroker, backup: LocalBroker, topic: str, *,
               batch_bytes: int, **top: str) -> str:
    """A standalone `primary->backup` replicator of `topic` (topics refreshed every 2 s)
    whose target producer batches at most `batch_bytes`; `top` adds top-level keys
    (`source_cluster_alias="east"` for `source.cluster.alias = east`)."""
    return mm2_config({"primary": primary, "backup": backup}, {"primary->backup": {
        "topics": topic, "refresh.topics.interval.seconds": "2"}},
        backup_producer_batch_size=str(batch_bytes), **top)


def flow_spec(a: str, b: str, topics: str, **props: str) -> flows_pb2.FlowSpec:
    """The spec of flow `a->b` for CreateFlow: `topics`, refreshed every second."""
    return flows_pb2.FlowSpec(source=a, target=b, properties={
        "topics": topics, "refresh.topics.interval.seconds": "1", **props})


def deployment_config(clusters: Mapping[str, LocalBroker | str],
                      flows: Mapping[str, Mapping[str, str]] | None = None, **top: str) -> str:
    """An MM2 file for a controller-run deployment of its own (unique control topics)."""
    top.setdefault("mirrorline_deployment", f"d{os.urandom(4).hex()}")
    return mm2_config(clusters, flows or {}, **top)


class Deployment:
    """A controller-run deployment of real processes: controllers and workers."""

    def __init__(self, config: str, tmp: Path, *, lease_ms: int = 2000,
                 credentials: ClientCredentials | None = None) -> None:
        self.credentials = credentials
        self.path = tmp / "mm2.properties"
        self.path.write_text(config)
        self.tmp = tmp
        self.lease_ms = lease_ms
        self.controllers: dict[str, ServiceProcess] = {}
        self.workers: dict[str, ServiceProcess] = {}
        self.checkpointers: dict[str, ServiceProcess] = {}

    async def controller(self, name: str = "c1", *, wait: bool = True) -> ServiceProcess:
        port = free_port()
        proc = ServiceProcess(
            ["controller", "--config", str(self.path), "--controller-id", name,
             "--grpc-port", str(port), "--metrics-port", "-1", "--lease-ms",
             str(self.lease_ms)], grpc_port=port, log_path=self.tmp / f"{name}.log",
            credentials=self.credentials)
        await proc.start()
        self.controllers[name] = proc
        if wait:
            await proc.wait_serving()
        return proc

    async def worker(self, name: str, *, metrics: bool = False) -> ServiceProcess:
        """A replicator worker; `metrics`: with a /metrics endpoint to `scrape`."""
        port, metrics_port = free_port(), free_port() if metrics else None
        proc = ServiceProcess(
            ["replicator", "--worker", "--config", str(self.path), "--worker-id", name,
             "--grpc-port", str(port), "--metrics-port", str(metrics_port or -1)],
            grpc_port=port, log_path=self.tmp / f"{name}.log", metrics_port=metrics_port,
            credentials=self.credentials)
        await proc.start()
        self.workers[name] = proc
        return proc

    async def executor(self, name: str = "x1", *, master: str = "local[2]",
                       conf: Mapping[str, str] | None = None) -> ServiceProcess:
        """A Spark executor (`mirrorline spark-executor`); the controller sees `spark:<name>`."""
        port = free_port()
        extra = [a for k, v in (conf or {}).items() for a in ("--spark-conf", f"{k}={v}")]
        proc = ServiceProcess(
            ["spark-executor", "--config", str(self.path), "--executor-id", name,
             "--master", master, "--grpc-port", str(port), "--metrics-port", "-1",
             "--spark-conf", "spark.ui.enabled=false", *extra], grpc_port=port,
            log_path=self.tmp / f"spark-{name}.log")
        await proc.start()
        self.workers[f"spark:{name}"] = proc
        return proc

    async def checkpointer(self, name: str = "k1") -> ServiceProcess:
        port = free_port()
        proc = ServiceProcess(
            ["checkpointer", "--managed", "--config", str(self.path), "--instance-id", name,
             "--grpc-port", str(port), "--metrics-port", "-1"], grpc_port=port,
            log_path=self.tmp / f"{name}.log", credentials=self.credentials)
        await proc.start()
        self.checkpointers[name] = proc
        return proc

    def admin(self, name: str | None = None) -> admin_pb2_grpc.AdminStub:
        proc = self.controllers[name] if name else next(iter(self.controllers.values()))
        return admin_pb2_grpc.AdminStub(proc.channel)

    async def leader(self, timeout: float = 30.0) -> str:
        """The name of the controller that answers the Admin API as leader."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            for name, proc in self.controllers.items():
                if proc.proc is None or proc.proc.returncode is not None:
                    continue
                try:
                    await admin_pb2_grpc.AdminStub(proc.channel).ListFlows(
                        admin_pb2.ListFlowsRequest(), timeout=2)
                    return name
                except grpc.aio.AioRpcError:
                    continue
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError("no controller leads; logs:\n" + "\n".join(
                    p.log_tail(15) for p in self.controllers.values()))
            await asyncio.sleep(0.2)

    async def status(self) -> admin_pb2.StatusReport:
        report: admin_pb2.StatusReport = await self.admin(await self.leader()).GetStatus(
            admin_pb2.GetStatusRequest(), timeout=5)
        return report

    async def owners(self) -> dict[tuple[str, int], str]:
        """(topic, partition) -> worker, for partitions reported running."""
        return {(p.source_topic, p.partition): p.worker_id for p in (await self.status()).partitions
                if p.state == flows_pb2.PARTITION_STATE_RUNNING}

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in [*self.checkpointers.values(),
                                                   *self.workers.values(),
                                                   *self.controllers.values()]))


@contextlib.asynccontextmanager
async def deployment(config: str, tmp: Path, *, lease_ms: int = 2000,
                     credentials: ClientCredentials | None = None
                     ) -> AsyncIterator[Deployment]:
    d = Deployment(config, tmp, lease_ms=lease_ms, credentials=credentials)
    try:
        yield d
    finally:
        await d.close()


async def admin_cli(server: str, *args: str, timeout: float = 120) -> tuple[int, str, str]:
    """`mirrorline admin --server SERVER ARGS` as a user runs it: exit status, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mirrorline", "admin", "--server", server, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


async def admin_cli_json(server: str, *args: str, timeout: float = 120) -> Any:
    """`mirrorline admin --output json ARGS`, which must succeed: its parsed answer."""
    code, out, err = await admin_cli(server, "--output", "json", *args, timeout=timeout)
    assert code == 0, err
    return json.loads(out)


def configsync(config: str, tmp: Path, name: str = "configsync", *,
               metrics: bool = False) -> ServiceProcess:
    """A standalone config-sync service on `config` (written to `tmp`), on free ports;
    `metrics=True` also serves /metrics on one."""
    path = tmp / f"{name}.properties"
    path.write_text(config)
    port = free_port()
    metrics_port = free_port() if metrics else None
    return ServiceProcess(["configsync", "--config", str(path), "--grpc-port", str(port),
                           "--metrics-port", str(metrics_port or -1), "--instance-id", name],
                          grpc_port=port, log_path=tmp / f"{name}.log",
                          metrics_port=metrics_port)
