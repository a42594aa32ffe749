"""How the partitions of a flow look in GetStatus and in worker heartbeats."""

from __future__ import annotations

import time
from collections.abc import Mapping

from aiokafka import TopicPartition

from mirrorline.replicator.lag import FlowLag
from mirrorline.replicator.pump import PartitionPump, PumpState
from mirrorline.telemetry.replication import PartitionMetrics
from mirrorline.v1 import flows_pb2

_PARTITION_STATES = {
    PumpState.RUNNING: flows_pb2.PARTITION_STATE_RUNNING,
    PumpState.PAUSED: flows_pb2.PARTITION_STATE_PAUSED,
    PumpState.ERROR: flows_pb2.PARTITION_STATE_ERROR,
    PumpState.STOPPED: flows_pb2.PARTITION_STATE_PAUSED,
}


def partition_views(flow: str, worker_id: str, pumps: Mapping[TopicPartition, PartitionPump],
                    metrics_of: Mapping[TopicPartition, PartitionMetrics],
                    lags: FlowLag
                    ) -> list[flows_pb2.PartitionStatus]:
    """One status per partition; `error` also carries how a partition resumed when an
    operator should know (an unmatched tail). Lag is against the source's log end as last
    measured (`replicator/lag.py`), whether the partition is being fetched or not."""
    now = time.time()
    views = []
    for tp, pump in sorted(pumps.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        lag = lags.lag(tp, pump, now * 1000.0)
        end = lags.end(tp)
        last = pump.last_ack_record_ts
        latency = now * 1000.0 - last if last is not None else -1.0
        metrics = metrics_of.get(tp)
        views.append(flows_pb2.PartitionStatus(
            flow=flow, source_topic=tp.topic, target_topic=pump.target_topic,
            partition=tp.partition, source_end_offset=-1 if end is None else end,
            next_offset=pump.next_offset, lag_records=lag.records,
            last_replication_latency_ms=latency, lag_ms=lag.ms,
            state=_PARTITION_STATES[pump.state], error=pump.error or pump.notice or "",
            records_replicated=pump.records_replicated, worker_id=worker_id,
            records_per_second=metrics.records.rate(now, of_count=True) if metrics else 0.0,
            bytes_per_second=metrics.value_bytes.rate(now) if metrics else 0.0,
            copy_path=pump.copy_path, copy_path_reason=pump.copy_path_reason))
    return views
