"""Admin RPCs `OffloadPartitions` / `ReclaimPartitions`: an operator's word on where
partitions run, recorded in the control log as `PartitionsPlaced`.

Offloading needs a live Spark executor (FAILED_PRECONDITION otherwise: the partitions stay
with the workers) and a flow whose `mirrorline.executor` is `auto` -- `workers` and `spark`
pin the whole flow, and an operator's word must not silently contradict the flow's
definition. The move itself is the reconciler's: fenced like every hand-over.
"""

from __future__ import annotations

from typing import Any, Protocol

import grpc

from mirrorline.controller.workers import WorkerRegistry
from mirrorline.core.control import ControlState, Outcome
from mirrorline.core.errors import ConfigError
from mirrorline.core.flowdefs import Definition, flow_settings
from mirrorline.core.settings import MirrorSettings
from mirrorline.v1 import control_pb2, spark_pb2

Context = grpc.aio.ServicerContext[Any, Any]


class Controller(Protocol):
    controller_id: str
    deployment: MirrorSettings
    registry: WorkerRegistry

    @property
    def state(self) -> ControlState: ...

    async def require_leader(self, context: Context) -> int: ...

    async def append(self, record: control_pb2.ControlRecord) -> tuple[int, Outcome]: ...


async def place(c: Controller, request: spark_pb2.PlacePartitionsRequest, context: Context,
                executor: str) -> spark_pb2.PlacePartitionsResponse:
    epoch = await c.require_leader(context)
    record = c.state.flows.get(request.flow)
    if record is None:
        await context.abort(grpc.StatusCode.NOT_FOUND, f"flow {request.flow} does not exist")
        raise AssertionError("unreachable")
    if not request.topic:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "topic: is required")
    partition = request.partition if request.HasField("partition") else -1
    if request.HasField("partition") and request.partition < 0:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                            f"partition: must be >= 0, not {request.partition}")
    try:
        settings = flow_settings(c.deployment, Definition(record.source, record.target,
                                                          record.properties))
    except ConfigError as exc:
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                            f"flow {request.flow} does not fit this deployment: {exc}")
        raise AssertionError("unreachable") from exc
    pinned = settings.offload.executor
    if pinned != "auto":
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                            f"flow {request.flow} has mirrorline.executor = {pinned}: every "
                            "partition runs there; set it to auto to place partitions "
                            "one by one")
    if executor == "spark" and not c.registry.spark_executors():
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                            "no Spark executor is alive (start `mirrorline spark-executor`); "
                            "the partitions stay with the replicator workers")
    out = control_pb2.ControlRecord(epoch=epoch, controller_id=c.controller_id,
                                    partitions_placed=spark_pb2.PartitionsPlaced(
                                        flow=request.flow, topic=request.topic,
                                        partition=partition, executor=executor))
    offset, outcome = await c.append(out)
    if outcome is Outcome.STALE:
        await context.abort(grpc.StatusCode.UNAVAILABLE,
                            "this controller was deposed before the change was recorded; "
                            "nothing changed -- retry against the new leader")
    if outcome is not Outcome.APPLIED:
        await context.abort(grpc.StatusCode.ABORTED, "the change conflicted; retry")
    return spark_pb2.PlacePartitionsResponse(flow=request.flow, topic=request.topic,
                                             partition=partition, executor=executor,
                                             control_offset=offset)
