"""What a micro-batch got acknowledged, per partition, on its way to the executor.

Every task that writes (on the batch path the read task itself, on the record path the
task that writes the chunk rows it read) returns one `PartitionAcks` per source
partition: where each acknowledged record landed, as runs. The executor's query
collects them once every task of the micro-batch succeeded (each waited for acks=all)
and hands them to the executor service, in its own process, which feeds them to the same
bookkeeping as the replicator (`mirrorline_spark.executor.query`). They travel as JSON
inside an acknowledgement row (`mirrorline_spark.records.acks_row`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class PartitionAcks:
    """What one task got acknowledged for one source partition."""

    topic: str
    partition: int
    remote_topic: str
    #: (upstream_start, count, downstream_start), in order (mirrorline.core.acked_runs).
    runs: list[tuple[int, int, int]] = field(default_factory=list)
    #: The target refused a record: names topic, partition and offset; runs hold what
    #: was acknowledged before it.
    error: str | None = None
    value_bytes: int = 0
    #: Record timestamps (ms) of the acknowledged records: min, max and the last one.
    min_timestamp: int = -1
    max_timestamp: int = -1
    last_timestamp: int = -1
    #: When the task first saw this partition's records (ms since the epoch): the
    #: reference of MM2's record age (the replicator measures it at fetch).
    fetched_ms: float = -1.0
    #: The flow the partition is copied for (a query may copy several).
    flow: str = ""
    #: The copy path of the partition's last chunk ("batches" or "records") and why, as
    #: the replicator's status says it (`PartitionStatus.copy_path`, `copy_path_reason`).
    copy_path: str = ""
    copy_path_reason: str = ""

    @property
    def records(self) -> int:
        return sum(count for _, count, _ in self.runs)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> PartitionAcks:
        doc = dict(doc)
        doc["runs"] = [tuple(r) for r in doc.get("runs", [])]
        return cls(**doc)
