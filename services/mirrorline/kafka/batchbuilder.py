"""A source record batch handed to aiokafka's producer as if aiokafka had built it.

`AIOKafkaProducer.send_batch` takes a batch builder and, when the batch leaves, asks it
for its record count (to advance the partition's sequence), gives it the producer id,
epoch and base sequence of an idempotent or transactional producer (`_set_producer_state`)
and asks for its bytes (`_build`). `SourceBatchBuilder` answers those calls for a batch
fetched from the source: its bytes are the source's, with the header rewritten for the
target (`core.batches.rewrite_header`: base offset, leader epoch, producer state,
transactional bit, CRC); its records section is not copied here, it goes into the produce
request as it was received (`kafka/produce_request.BatchParts`). So the batch path keeps
everything aiokafka's producer does around a batch -- leader routing, one produce request
carrying every partition's batch, retries, idempotence, transactions -- and copies no
record.
"""

from __future__ import annotations

from mirrorline.core.batches import Batch, rewrite_header
from mirrorline.kafka.produce_request import BatchParts, produce_requests_flat

__all__ = ["SourceBatchBuilder"]


class SourceBatchBuilder:
    """One source batch, ready to be queued with `producer.send_batch`."""

    def __init__(self, batch: Batch, *, transactional: bool = False) -> None:
        assert batch.header is not None, "only magic-2 batches are copied as they are"
        self._batch = batch
        self._count = batch.header.record_count
        self._transactional = transactional
        self._state = (-1, -1, -1)
        self._buffer: bytearray | BatchParts | None = None

    # -- what aiokafka's BatchBuilder offers its callers --------------------------------
    def append(self, **_record: object) -> None:
        """Nothing can be added to a batch copied as it is."""
        return None

    def close(self) -> None:
        pass

    def closed(self) -> bool:
        return True

    def size(self) -> int:
        return len(self._batch.data)

    def record_count(self) -> int:
        return self._count

    # -- what aiokafka's producer calls when the batch leaves ---------------------------
    def _set_producer_state(self, producer_id: int, producer_epoch: int,
                            base_sequence: int) -> None:
        self._state = (producer_id, producer_epoch, base_sequence)
        self._buffer = None

    def _build(self) -> bytearray | BatchParts:
        """The batch as sent: its new header and the source's records section, left as
        two pieces where the produce request takes pieces (one copy into the request)."""
        if self._buffer is None:
            producer_id, epoch, sequence = self._state
            header, records = rewrite_header(
                self._batch, producer_id=producer_id, producer_epoch=epoch,
                base_sequence=sequence, transactional=self._transactional)
            self._buffer = BatchParts(header, records) if produce_requests_flat() else \
                header + records
        return self._buffer

    def sent_bytes(self) -> bytes:
        """The bytes `_build` hands the producer, joined."""
        built = self._build()
        return b"".join(built.parts) if isinstance(built, BatchParts) else bytes(built)
