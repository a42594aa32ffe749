"""The public Admin API: validate, append to the control log, answer from the state.

Nothing is appended before it validated: a request that fails validation changes
nothing. Errors use gRPC's codes the way operators expect them: INVALID_ARGUMENT names
the field (`spec.properties.topics`), NOT_FOUND and ALREADY_EXISTS name the flow,
FAILED_PRECONDITION explains what state prevents the change, UNAVAILABLE comes from a
controller that does not lead (with the leader's address in the trailing metadata).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, NoReturn, Protocol

import grpc

from mirrorline.controller import placement, status
from mirrorline.controller.audit import MAX_HISTORY, history
from mirrorline.controller.discovery import Discoveries
from mirrorline.controller.drift import DriftAdmin
from mirrorline.controller.failback import Failback, FailbackError, ScrapeRefused, confirmation
from mirrorline.controller.forwarding import announced_channel, forward
from mirrorline.controller.lag import UnownedLag
from mirrorline.controller.workers import WorkerRegistry
from mirrorline.core.bounds import MAX_FAILOVER_GROUPS
from mirrorline.core.control import ControlState, FlowRecord, Outcome
from mirrorline.core.errors import ConfigError, one_line, quoted
from mirrorline.core.flowdefs import (
    Definition,
    check_keys,
    compose,
    differences,
    file_defaults,
    import_definitions,
    property_of,
)
from mirrorline.core.settings import MirrorSettings
from mirrorline.grpcsecure import MAX_MESSAGE_BYTES
from mirrorline.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    audit_pb2,
    control_pb2,
    failover_pb2,
    failover_pb2_grpc,
    flows_pb2,
    heartbeat_pb2,
    heartbeat_pb2_grpc,
    spark_pb2,
)

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]

#: Largest answer the Admin API builds before it changes anything (gRPC's message limit,
#: less room for the framing).
MAX_REPLY_BYTES = MAX_MESSAGE_BYTES - 64 * 1024


class ControllerContext(Protocol):
    controller_id: str
    deployment: MirrorSettings
    discoveries: Discoveries
    registry: WorkerRegistry
    lag: UnownedLag

    @property
    def state(self) -> ControlState: ...

    async def require_leader(self, context: Context) -> int: ...

    async def append(self, record: control_pb2.ControlRecord) -> tuple[int, Outcome]: ...


class AdminServicer(DriftAdmin, admin_pb2_grpc.AdminServicer):
    def __init__(self, controller: ControllerContext) -> None:
        self._c = controller

    # -- flows ------------------------------------------------------------------------
    async def ListFlows(self, request: admin_pb2.ListFlowsRequest,
                        context: Context) -> admin_pb2.ListFlowsResponse:
        await self._c.require_leader(context)
        return admin_pb2.ListFlowsResponse(
            flows=[self._flow(r) for _, r in sorted(self._c.state.flows.items())])

    async def GetFlow(self, request: admin_pb2.FlowRequest, context: Context) -> admin_pb2.Flow:
        await self._c.require_leader(context)
        return self._flow(await self._existing(request.name, context))

    async def CreateFlow(self, request: admin_pb2.CreateFlowRequest,
                         context: Context) -> admin_pb2.Flow:
        epoch = await self._c.require_leader(context)
        spec = request.spec
        for field_name in ("source", "target"):
            if not getattr(spec, field_name):
                await _invalid(context, f"spec.{field_name}", "is required")
        await self._validate(Definition(spec.source, spec.target, dict(spec.properties)),
                             context)
        # The file's top-level flow properties are the defaults of a new flow; they are
        # written into its definition, so later edits of the file cannot change it.
        properties = {**file_defaults(self._c.deployment), **spec.properties}
        definition = Definition(spec.source, spec.target, properties)
        await self._validate(definition, context)
        if definition.name in self._c.state.flows:
            await context.abort(grpc.StatusCode.ALREADY_EXISTS,
                                f"flow {definition.name} already exists")
        await self._append(context, epoch, flow_created=control_pb2.FlowCreated(
            spec=flows_pb2.FlowSpec(source=spec.source, target=spec.target,
                                    properties=properties)))
        return self._flow(self._c.state.flows[definition.name])

    async def UpdateFlow(self, request: admin_pb2.UpdateFlowRequest,
                         context: Context) -> admin_pb2.Flow:
        epoch = await self._c.require_leader(context)
        record = await self._existing(request.name, context)
        if not request.set and not request.unset:
            await _invalid(context, "set", "nothing to change: give properties to set or unset")
        properties = dict(record.properties)
        for key in request.unset:
            if key not in properties:
                shown = key if key.isprintable() and len(key) <= 100 else quoted(key, 100)
                await _invalid(context, f"unset.{shown}", "is not set on this flow")
            del properties[key]
        properties.update(request.set)
        definition = Definition(record.source, record.target, properties)
        await self._validate(definition, context, prefix="set")
        if properties != record.properties:
            await self._append(context, epoch, flow_updated=control_pb2.FlowUpdated(
                spec=flows_pb2.FlowSpec(source=record.source, target=record.target,
                                        properties=properties)))
        return self._flow(self._c.state.flows[record.name])

    async def PauseFlow(self, request: admin_pb2.FlowRequest, context: Context) -> admin_pb2.Flow:
        epoch = await self._c.require_leader(context)
        record = await self._existing(request.name, context)
        if record.paused:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"flow {record.name} is already paused")
        await self._append(context, epoch, flow_paused=control_pb2.FlowPaused(flow=record.name))
        return self._flow(self._c.state.flows[record.name])

    async def ResumeFlow(self, request: admin_pb2.FlowRequest,
                         context: Context) -> admin_pb2.Flow:
        epoch = await self._c.require_leader(context)
        record = await self._existing(request.name, context)
        if not record.paused:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"flow {record.name} is not paused")
        await self._append(context, epoch,
                           flow_resumed=control_pb2.FlowResumed(flow=record.name))
        return self._flow(self._c.state.flows[record.name])

    async def DeleteFlow(self, request: admin_pb2.FlowRequest,
                         context: Context) -> admin_pb2.DeleteFlowResponse:
        epoch = await self._c.require_leader(context)
        record = await self._existing(request.name, context)
        await self._append(context, epoch, flow_deleted=control_pb2.FlowDeleted(flow=record.name))
        return admin_pb2.DeleteFlowResponse(name=record.name)

    async def ImportFlows(self, request: admin_pb2.ImportFlowsRequest,
                          context: Context) -> admin_pb2.ImportFlowsResponse:
        epoch = await self._c.require_leader(context)
        source = (request.source_name or "imported file")[:200]  # named in every error
        try:
            definitions, warnings = import_definitions(request.properties, source=source)
        except ConfigError as exc:
            await _invalid(context, "properties", str(exc))
        reply = admin_pb2.ImportFlowsResponse(warnings=warnings)
        for name, definition in definitions.items():
            await self._validate(definition, context, prefix=f"properties ({name})")
        current = {n: Definition(r.source, r.target, r.properties)
                   for n, r in self._c.state.flows.items()}
        reply.warnings.extend(d for d in differences(definitions, current)
                              if "not enabled in the file" in d)
        # The whole answer is known, and known to fit in a reply, before anything is
        # appended: an answer over gRPC's limit would reach the caller as
        # RESOURCE_EXHAUSTED after the flows had been changed (and audited OK).
        changes: list[tuple[str, flows_pb2.FlowSpec]] = []
        for name, definition in definitions.items():
            spec = flows_pb2.FlowSpec(source=definition.source, target=definition.target,
                                      properties=dict(definition.properties))
            existing = current.get(name)
            if existing is None:
                changes.append(("created", spec))
                reply.created.append(name)
            elif dict(existing.properties) != dict(definition.properties):
                changes.append(("updated", spec))
                reply.updated.append(name)
            else:
                reply.unchanged.append(name)
        if reply.ByteSize() > MAX_REPLY_BYTES:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, (
                f"the answer would be {reply.ByteSize()} bytes, over {MAX_REPLY_BYTES}; "
                "nothing was imported: import fewer flows at once"))
        for change, spec in changes:
            if change == "created":
                await self._append(context, epoch,
                                   flow_created=control_pb2.FlowCreated(spec=spec))
            else:
                await self._append(context, epoch,
                                   flow_updated=control_pb2.FlowUpdated(spec=spec))
        return reply

    # -- status -----------------------------------------------------------------------
    async def GetStatus(self, request: admin_pb2.GetStatusRequest,
                        context: Context) -> admin_pb2.StatusReport:
        await self._c.require_leader(context)
        if request.flow:
            await self._existing(request.flow, context)
        await self._c.registry.refresh_statuses()
        report = self._report(request.flow)
        await self._audit_totals(report)
        return report

    async def WatchStatus(self, request: admin_pb2.WatchStatusRequest,
                          context: Context) -> AsyncIterator[admin_pb2.StatusReport]:
        await self._c.require_leader(context)
        if request.flow:
            await self._existing(request.flow, context)
        interval = request.interval_ms or 2000
        if interval < 200:
            await _invalid(context, "interval_ms", f"must be at least 200 (got {interval})")
        while True:
            await self._c.require_leader(context)
            await self._c.registry.refresh_statuses()
            report = self._report(request.flow)
            await self._audit_totals(report)
            yield report
            await asyncio.sleep(interval / 1000)

    async def ListWorkers(self, request: admin_pb2.ListWorkersRequest,
                          context: Context) -> admin_pb2.ListWorkersResponse:
        await self._c.require_leader(context)
        return status.workers(self._c.state, self._c.registry)

    async def History(self, request: audit_pb2.HistoryRequest,
                      context: Context) -> audit_pb2.HistoryResponse:
        await self._c.require_leader(context)
        limit = request.limit or 100
        if not 0 < limit <= MAX_HISTORY:
            await _invalid(context, "limit", f"must be between 1 and {MAX_HISTORY}")
        return history(self._c.state, request.flow, limit)

    # -- offsets and disaster recovery ----------------------------------------------------
    async def TranslateOffsets(self, request: failover_pb2.TranslateOffsetsRequest,
                               context: Context) -> failover_pb2.TranslateOffsetsResponse:
        await self._c.require_leader(context)
        await self._existing(request.flow, context)
        if not request.group:
            await _invalid(context, "group", "is required")
        stub = await self._checkpointer(context)
        reply: failover_pb2.TranslateOffsetsResponse = await forward(
            context, stub.TranslateOffsets, request, 30)
        return reply

    async def PlanFailover(self, request: failover_pb2.PlanFailoverRequest,
                           context: Context) -> failover_pb2.FailoverPlan:
        await self._c.require_leader(context)
        await self._existing(request.flow, context)
        if not request.groups:
            await _invalid(context, "groups", "name at least one consumer group")
        if len(request.groups) > MAX_FAILOVER_GROUPS:
            await _invalid(context, "groups", f"the call names {len(request.groups)} groups; "
                           f"at most {MAX_FAILOVER_GROUPS} per call: split them over several "
                           "calls")
        stub = await self._checkpointer(context)
        reply: failover_pb2.FailoverPlan = await forward(
            context, stub.PlanFailover, request, 30)
        return reply

    async def ExecuteFailover(self, request: failover_pb2.ExecuteFailoverRequest,
                              context: Context) -> failover_pb2.FailoverResult:
        await self._c.require_leader(context)
        await self._existing(request.flow, context)
        if not request.groups:
            await _invalid(context, "groups", "name at least one consumer group")
        if request.mode == failover_pb2.FAILOVER_MODE_UNSPECIFIED:
            await _invalid(context, "mode", "choose drain (planned: waits until everything "
                                            "is mirrored) or now (unplanned)")
        stub = await self._checkpointer(context)
        timeout = (request.drain_timeout_ms or 60_000) / 1000 + 30
        reply: failover_pb2.FailoverResult = await forward(
            context, stub.ExecuteFailover, request, timeout)
        return reply

    async def FailoverToTime(self, request: failover_pb2.FailoverToTimeRequest,
                             context: Context) -> failover_pb2.FailoverResult:
        await self._c.require_leader(context)
        await self._existing(request.flow, context)
        if not request.groups:
            await _invalid(context, "groups", "name at least one consumer group")
        if request.timestamp_ms <= 0:
            await _invalid(context, "timestamp_ms", "must be a positive epoch time in ms")
        stub = await self._checkpointer(context)
        reply: failover_pb2.FailoverResult = await forward(
            context, stub.FailoverToTime, request, 120)
        return reply

    async def PlanFailback(self, request: failover_pb2.PlanFailbackRequest,
                           context: Context) -> failover_pb2.FailbackPlan:
        await self._c.require_leader(context)
        record = await self._existing(request.flow, context)
        try:
            failback = await self._failback(record)
            return await failback.plan(failback.reverse in self._c.state.flows)
        except FailbackError as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
            raise

    # -- where partitions run (issue 8) ---------------------------------------------------
    async def OffloadPartitions(self, request: spark_pb2.PlacePartitionsRequest,
                                context: Context) -> spark_pb2.PlacePartitionsResponse:
        return await placement.place(self._c, request, context, "spark")

    async def ReclaimPartitions(self, request: spark_pb2.PlacePartitionsRequest,
                                context: Context) -> spark_pb2.PlacePartitionsResponse:
        return await placement.place(self._c, request, context, "workers")

    async def ExecuteFailback(self, request: failover_pb2.ExecuteFailbackRequest,
                              context: Context) -> failover_pb2.FailbackResult:
        epoch = await self._c.require_leader(context)
        record = await self._existing(request.flow, context)
        try:
            failback = await self._failback(record)
        except FailbackError as exc:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
            raise
        result = failover_pb2.FailbackResult(reverse_flow=failback.reverse)
        if request.scrape:
            if not record.paused:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, (
                    f"pause flow {record.name} before scraping {record.source}: running, it "
                    "would copy the emptied topics again"))
            if request.confirm != confirmation(record):
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, (
                    f"scraping deletes the data of {record.source}: to confirm, pass "
                    f"confirm {confirmation(record)!r} (see the failback plan)"))
            try:
                topics = list(request.topics) or list(await failback.topics())
                scraped, deleted = await failback.scrape(topics)
            except ScrapeRefused as exc:
                await _invalid(context, "topics", str(exc))
            except FailbackError as exc:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
                raise
            result.scraped_topics.extend(scraped)
            result.deleted_groups.extend(deleted)
        if failback.reverse not in self._c.state.flows:
            await self._append(context, epoch, flow_created=control_pb2.FlowCreated(
                spec=flows_pb2.FlowSpec(source=record.target, target=record.source,
                                        properties=dict(record.properties))))
            result.created = True
        result.warnings.extend(failback.warnings)
        return result

    # -- heartbeats, canary, audit (served by the heartbeat service) --------------------
    async def Topology(self, request: heartbeat_pb2.TopologyRequest,
                       context: Context) -> heartbeat_pb2.TopologyReport:
        await self._c.require_leader(context)
        reply: heartbeat_pb2.TopologyReport = await forward(
            context, (await self._heartbeat(context)).Topology, request, 30)
        return reply

    async def Canary(self, request: heartbeat_pb2.CanaryRequest,
                     context: Context) -> heartbeat_pb2.CanaryReport:
        await self._c.require_leader(context)
        reply: heartbeat_pb2.CanaryReport = await forward(
            context, (await self._heartbeat(context)).Canary, request, 30)
        return reply

    async def Audit(self, request: heartbeat_pb2.AuditRequest,
                    context: Context) -> heartbeat_pb2.AuditReport:
        await self._c.require_leader(context)
        await self._existing(request.flow, context)
        reply: heartbeat_pb2.AuditReport = await forward(
            context, (await self._heartbeat(context)).Audit, request, 30)
        return reply

    async def _audit_totals(self, report: admin_pb2.StatusReport) -> None:
        """Add each flow's audit totals when a heartbeat service answers quickly; the status
        never waits long for it or fails because of it."""
        address = self._c.registry.service_address("heartbeat")
        if address is None:
            return
        stub = heartbeat_pb2_grpc.HeartbeatStub(self._c.registry.channel(address))
        for flow in report.flows:
            try:
                reply = await stub.Audit(heartbeat_pb2.AuditRequest(
                    flow=flow.flow, since_ms=2**62), timeout=1.0)
            except grpc.aio.AioRpcError:
                continue
            report.audit.append(reply.totals)

    async def _heartbeat(self, context: Context) -> heartbeat_pb2_grpc.HeartbeatStub:
        return heartbeat_pb2_grpc.HeartbeatStub(await announced_channel(
            context, self._c.registry, "heartbeat", "heartbeat service"))

    async def _checkpointer(self, context: Context) -> failover_pb2_grpc.CheckpointerStub:
        return failover_pb2_grpc.CheckpointerStub(await announced_channel(
            context, self._c.registry, "checkpointer", "checkpointer"))

    async def _failback(self, record: FlowRecord) -> Failback:
        try:
            old = await self._c.discoveries.admin(record.source)
            new = await self._c.discoveries.admin(record.target)
        except Exception as exc:
            raise_later = f"cannot reach the clusters of {record.name}: {exc!r}"
            raise FailbackError(raise_later) from exc
        return Failback(self._c.deployment, record, old, new)

    # -- helpers ----------------------------------------------------------------------
    def _report(self, flow: str | None) -> admin_pb2.StatusReport:
        return status.report(self._c.state, self._c.registry, self._c.discoveries,
                             controller_id=self._c.controller_id, flow=flow or None,
                             measured=self._c.lag)

    def _flow(self, record: FlowRecord) -> admin_pb2.Flow:
        partitions = status.partition_statuses(self._c.state, self._c.registry, record.name,
                                               self._c.discoveries.desired(), self._c.lag)
        summary = status.flow_summary(record, partitions, self._c.discoveries)
        return status.flow_message(record, summary)

    async def _existing(self, name: str, context: Context) -> FlowRecord:
        if "->" not in name:
            await _invalid(context, "name", f"{quoted(name)} is not a flow name (source->target)")
        record = self._c.state.flows.get(name)
        if record is None:
            shown = name if name.isprintable() and len(name) <= 200 else quoted(name)
            await context.abort(grpc.StatusCode.NOT_FOUND, f"flow {shown} does not exist")
        assert record is not None
        return record

    async def _validate(self, definition: Definition, context: Context, *,
                        prefix: str = "spec.properties") -> None:
        try:
            check_keys(definition.properties)
            compose(self._c.deployment, [definition])
        except ConfigError as exc:
            field_name = property_of(exc, definition)
            where = (f"spec.{field_name}" if field_name in ("source", "target")
                     else f"{prefix}.{field_name}")
            await _invalid(context, where, exc.message)
        except Exception as exc:  # not a configuration error, but still not storable:
            # refused like one, so no follower ever has to apply it.
            log.debug("validating %s failed", definition.name, exc_info=True)
            await _invalid(context, prefix, f"cannot be applied: {one_line(exc)}")

    async def _append(self, context: Context, epoch: int, **event: Any) -> None:
        record = control_pb2.ControlRecord(epoch=epoch, controller_id=self._c.controller_id,
                                           **event)
        _, outcome = await self._c.append(record)
        if outcome is Outcome.STALE:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                "this controller was deposed before the change was recorded; "
                                "nothing changed -- retry against the new leader")
        if outcome is not Outcome.APPLIED:
            await context.abort(grpc.StatusCode.ABORTED,
                                "the change conflicted with a concurrent one; retry")


async def _invalid(context: Context, field_name: str, message: str) -> NoReturn:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{field_name}: {message}")
    raise AssertionError("unreachable")  # abort raises
