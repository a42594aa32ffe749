"""The spans a flow's data path records: one per fetch and one per acknowledged batch.

Kept out of the flow's control logic so that what a trace backend shows of replication --
span names, OpenTelemetry messaging attributes, links to the records' own traces -- is
stated in one place. A `produce` span starts when the batch was sent and ends when the
target acknowledged it, and links to the trace context of every record that carries one
(`mirrorline.telemetry.links`) -- on the record path: a batch copied as it is is never
decoded, so its span says `mirrorline.copy.path = batches` and carries no links.
"""

from __future__ import annotations

from opentelemetry.trace import Tracer

from mirrorline.replicator.pump import Delivered, PartitionPump
from mirrorline.telemetry.links import link_records

__all__ = ["trace_fetch", "trace_produce"]


def trace_fetch(tracer: Tracer, flow: str, started_ns: int, count: int,
                partitions: int) -> None:
    """A fetch that returned `count` records of `partitions` partitions."""
    span = tracer.start_span("fetch", start_time=started_ns, attributes={
        "mirrorline.flow": flow, "messaging.batch.message_count": count,
        "mirrorline.partitions": partitions})
    span.end()


def trace_produce(tracer: Tracer, flow: str, pump: PartitionPump,
                  delivered: Delivered) -> None:
    """A batch the target acknowledged, from its send to now."""
    shipment = delivered.shipment
    span = tracer.start_span("produce", start_time=delivered.sent_ns, attributes={
        "mirrorline.flow": flow, "messaging.destination.name": pump.target_topic,
        "messaging.destination.partition.id": str(pump.partition),
        "messaging.batch.message_count": shipment.count,
        "mirrorline.source.offset": shipment.first_offset,
        "mirrorline.target.offset": delivered.base_offset,
        "mirrorline.copy.path": "records" if shipment.batch is None else "batches"})
    if shipment.records is not None:  # a batch copied as it is was never decoded
        link_records(span, shipment.records)
    span.end()
