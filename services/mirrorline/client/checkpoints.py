"""Fold checkpoint records into a group's latest translated offsets (the pure half).

Separate from the Kafka reading so the rules -- last record wins per downstream partition,
other groups and undecodable records are skipped -- are testable without a broker.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import TypeAlias

from mirrorline.core.bad_records import BadRecords
from mirrorline.core.wire import Checkpoint
from mirrorline.kafka.records import Record

__all__ = ["TranslatedOffsets", "fold_checkpoints"]

#: (downstream topic, partition) -> (downstream offset, metadata), like Java's
#: ``Map<TopicPartition, OffsetAndMetadata>``.
TranslatedOffsets: TypeAlias = dict[tuple[str, int], tuple[int, str]]


def fold_checkpoints(records: Iterable[Record], group: str,
                     into: TranslatedOffsets | None = None,
                     bad: BadRecords | None = None) -> TranslatedOffsets:
    """Apply `records` in order to `into` (a new dict when None) and return it.

    The topic is compacted by (group, topic, partition) but compaction lags, so older
    checkpoints of the same key are still there: reading in log order and overwriting keeps
    the newest, exactly as MM2 does.  Records that do not decode (tombstones, foreign
    writers) are skipped and reported once each at WARNING with their coordinates (MM2
    logs "Could not deserialize record"); pass `bad` to share the once-only memory across
    calls.
    """
    bad = bad if bad is not None else BadRecords("checkpoint reader")
    offsets: TranslatedOffsets = {} if into is None else into
    for record in records:
        checkpoint = bad.decode(record.topic, record.partition, record.offset,
                                functools.partial(Checkpoint.decode, record.key, record.value))
        if checkpoint is None:
            continue
        if checkpoint.group == group:
            offsets[checkpoint.topic_partition] = (checkpoint.downstream_offset,
                                                   checkpoint.metadata)
    return offsets
