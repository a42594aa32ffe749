"""The `mirrorline spark-executor` process: gRPC health and status, metrics under the
replicator's MM2 names, a Spark driver, and the agent that follows the control log."""

from __future__ import annotations

import asyncio
import atexit
import logging
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence

import grpc
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from mirrorline.core.settings import MirrorSettings
from mirrorline.grpcserver import ServiceServer
from mirrorline.runtime import stop_within
from mirrorline.servicehost import ServiceHost
from mirrorline.telemetry.replication import ReplicationMetrics
from mirrorline.v1 import flows_pb2, replicator_pb2, replicator_pb2_grpc
from mirrorline_spark.executor import preflight
from mirrorline_spark.executor.agent import SparkAgent
from mirrorline_spark.executor.driver import SparkDriver

log = logging.getLogger(__name__)


class SparkExecutorService(ServiceHost):
    """A Spark driver and the agent that runs what the control log assigns, on the host."""

    kind = "spark-executor"
    grpc_grace_s = 2.0

    def __init__(self, settings: MirrorSettings, *, executor_id: str, master: str,
                 spark_conf: Mapping[str, str], targets: Sequence[str] | None = None,
                 grpc_host: str = "127.0.0.1", grpc_port: int = 0,
                 metrics_host: str = "127.0.0.1", metrics_port: int | None = 0,
                 advertise: str | None = None) -> None:
        super().__init__(settings, instance_id=executor_id, targets=targets,
                         grpc_host=grpc_host, grpc_port=grpc_port, metrics_host=metrics_host,
                         metrics_port=metrics_port, advertise=advertise, joins=True)
        #: The worker id the controller sees: `spark:<id>`.
        self.worker_id = f"spark:{executor_id}"
        self.master = master
        self.driver = SparkDriver(master, spark_conf, app_name=f"mirrorline-{executor_id}")
        self.agent: SparkAgent | None = None
        self._replication: ReplicationMetrics | None = None
        #: The drain file of the running query (its private work directory): removed
        #: by `stop` as soon as the queries have stopped, and at exit in any case (a stop
        #: that overran its budget -- Spark's own stop takes seconds -- left one behind
        #: in the temp folder at every start).
        self._workdir = tempfile.mkdtemp(prefix="mirrorline-spark-")
        atexit.register(shutil.rmtree, self._workdir, ignore_errors=True)

    @property
    def telemetry_instance(self) -> str:
        return self.worker_id

    @property
    def control_client_id(self) -> str:
        return f"executor-{self.worker_id}"

    async def check(self) -> None:
        await preflight.check_reachable(self.master)

    def register_metrics(self, meter: Meter) -> None:
        self._replication = ReplicationMetrics(meter)
        self._register_state_metrics(meter)

    def add_servicers(self, server: ServiceServer) -> None:
        server.add(replicator_pb2_grpc.add_ReplicatorServicer_to_server,
                   _StatusServicer(self),
                   [replicator_pb2.DESCRIPTOR.services_by_name["Replicator"].full_name])

    async def started(self) -> None:
        await self.driver.start()
        assert self.telemetry is not None
        log.info("spark executor %s: gRPC %s, metrics %s, master %s, UI %s", self.worker_id,
                 self.grpc_port, self.telemetry.metrics_port, self.master,
                 self.driver.ui_address or "off")

    async def on_joined(self) -> None:
        assert self._control is not None and self._replication is not None
        self.agent = SparkAgent(self.settings, self._control, worker_id=self.worker_id,
                                address=self.address, driver=self.driver,
                                metrics=self._replication, workdir=self._workdir)
        await self.agent.start()

    async def stop(self) -> None:
        try:
            await super().stop()
        finally:
            shutil.rmtree(self._workdir, ignore_errors=True)

    async def stop_parts(self) -> None:
        if self.agent is not None:
            await stop_within(self.agent.stop(), 1.2, "stopping the executor's queries")
        # The queries have stopped: nothing uses the folder any more, and what
        # follows (Spark's stop) may outlast the process's stop budget.
        await asyncio.to_thread(shutil.rmtree, self._workdir, ignore_errors=True)

    async def stop_rest(self) -> None:
        await self.driver.stop()

    def state_values(self) -> dict[str, int]:
        """The executor's own state as numbers (its `spark-executor-*` gauges): serving,
        fenced (cut off from the controller), problem (its query failed: partitions go
        back to the workers) and the partitions it runs."""
        agent = self.agent
        return {"serving": int(self.serving()),
                "fenced": int(agent is not None and agent.fenced),
                "problem": int(agent is not None and bool(agent.problem)),
                "partitions": 0 if agent is None else sum(
                    len(run.partitions()) for run in list(agent.runs.values()))}

    def _register_state_metrics(self, meter: Meter) -> None:
        def observe(pick: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
            def callback(_: CallbackOptions) -> Iterable[Observation]:
                return [Observation(self.state_values()[pick], {"executor": self.worker_id})]
            return callback
        for pick, description in (
                ("serving", "1 while the executor serves (started, not fenced, no problem)"),
                ("fenced", "1 while fenced: no heartbeat reached the controller in time"),
                ("problem", "1 while its Spark query has failed (partitions given back)"),
                ("partitions", "partitions the executor's query copies")):
            meter.create_observable_gauge(f"spark-executor-{pick}", callbacks=[observe(pick)],
                                          description=description)

    def serving(self) -> bool:
        agent = self.agent
        return agent is not None and not agent.fenced and not agent.heartbeat_error \
            and not agent.problem and agent.control.failed is None

    def status(self) -> replicator_pb2.ReplicatorStatus:
        out = replicator_pb2.ReplicatorStatus(worker_id=self.worker_id, serving=self.serving())
        if self.agent is None:
            return out
        for name, run in sorted(self.agent.runs.items()):
            views = run.partitions()
            out.flows.add(flow=name, state=flows_pb2.FLOW_STATE_ERROR if self.agent.problem
                          else flows_pb2.FLOW_STATE_RUNNING, error=self.agent.problem,
                          partitions=len(views))
            out.partitions.extend(views)
        return out


class _StatusServicer(replicator_pb2_grpc.ReplicatorServicer):
    """The replicator's GetStatus, so the controller reads an executor like a worker."""

    def __init__(self, service: SparkExecutorService) -> None:
        self._service = service

    async def GetStatus(self, request: replicator_pb2.GetReplicatorStatusRequest,
                        context: grpc.aio.ServicerContext[
                            replicator_pb2.GetReplicatorStatusRequest,
                            replicator_pb2.ReplicatorStatus]
                        ) -> replicator_pb2.ReplicatorStatus:
        return self._service.status()
