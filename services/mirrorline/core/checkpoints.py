"""Checkpoint decisions of MM2's MirrorCheckpointTask, free of any Kafka client.

Three concerns live here:

* :class:`CheckpointStore` remembers the last checkpoint per (group, downstream partition).  It
  is seeded from the checkpoints topic at start so that translations that move backwards after a
  restart (the offset-sync history is rebuilt sparser than before) are not published.
* :func:`compute_checkpoints` turns one group's committed upstream offsets into the checkpoints
  worth publishing this cycle.
* :func:`plan_group_offset_sync` decides which translated offsets to write into a target group,
  never moving an idle group's existing offset backwards.

Partitions are plain ``(topic, partition)`` tuples so that this module stays importable and
testable without a Kafka client.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping

from mirrorline.core.errors import WireFormatError
from mirrorline.core.wire import Checkpoint, RawBytes

__all__ = [
    "CheckpointStore",
    "TopicPartitionKey",
    "compute_checkpoints",
    "is_more_recent",
    "plan_group_offset_sync",
]

#: ``(topic, partition)``; whether it is an upstream or downstream name depends on context.
TopicPartitionKey = tuple[str, int]


class CheckpointStore:
    """Last checkpoint per group and downstream partition.

    ``groups`` restricts what :meth:`load` keeps to the groups this task is responsible for; the
    checkpoints topic is shared by all tasks of a flow.  ``None`` keeps every group.
    """

    def __init__(self, groups: Collection[str] | None = None) -> None:
        self._groups = None if groups is None else frozenset(groups)
        self._by_group: dict[str, dict[TopicPartitionKey, Checkpoint]] = {}

    def load(self, records: Iterable[Checkpoint]) -> None:
        """Fold checkpoints read from the topic in order; the last one per key wins."""
        for checkpoint in records:
            if self._groups is None or checkpoint.group in self._groups:
                self._put(checkpoint)

    def load_raw(
        self, records: Iterable[tuple[RawBytes | None, RawBytes | None]]
    ) -> list[WireFormatError]:
        """Like :meth:`load` for raw ``(key, value)`` records.

        Records that do not decode are skipped, as Java MM2 does; their errors are returned so
        the caller can log them.
        """
        errors: list[WireFormatError] = []
        decoded: list[Checkpoint] = []
        for key, value in records:
            try:
                decoded.append(Checkpoint.decode(key, value))
            except WireFormatError as exc:
                errors.append(exc)
        self.load(decoded)
        return errors

    def clear(self) -> None:
        """Forget everything (a failed initial read must not leave a partial view behind)."""
        self._by_group.clear()

    def update(self, checkpoints: Iterable[Checkpoint]) -> None:
        """Record checkpoints that are about to be published."""
        for checkpoint in checkpoints:
            self._put(checkpoint)

    def _put(self, checkpoint: Checkpoint) -> None:
        per_group = self._by_group.setdefault(checkpoint.group, {})
        per_group[checkpoint.topic_partition] = checkpoint

    def get(self, group: str, topic: str, partition: int) -> Checkpoint | None:
        per_group = self._by_group.get(group)
        return None if per_group is None else per_group.get((topic, partition))

    def has_group(self, group: str) -> bool:
        return group in self._by_group

    def groups(self) -> list[str]:
        """Groups with at least one checkpoint, in first-seen order."""
        return list(self._by_group)

    def for_group(self, group: str) -> dict[TopicPartitionKey, Checkpoint]:
        """A copy of the group's checkpoints keyed by downstream partition."""
        return dict(self._by_group.get(group, {}))


def is_more_recent(new: Checkpoint, last: Checkpoint | None) -> bool:
    """Whether ``new`` should be published given the last one for the same group partition.

    Downstream offsets only move forward, except when the upstream group itself was rewound (a
    smaller upstream offset), which must be mirrored.  An equal downstream offset is a repeat.
    """
    if last is None:
        return True
    if new.upstream_offset < last.upstream_offset:
        return True
    return new.downstream_offset > last.downstream_offset


def compute_checkpoints(
    group: str,
    committed: Mapping[TopicPartitionKey, tuple[int, str] | None],
    *,
    translate: Callable[[str, int, int], int | None],
    rename: Callable[[str], str],
    accepts_topic: Callable[[str], bool],
    store: CheckpointStore,
) -> list[Checkpoint]:
    """The checkpoints to publish for ``group`` this cycle, in ``committed`` order.

    ``committed`` maps upstream partitions to ``(offset, metadata)`` (None for a missing entry);
    ``translate(topic, partition, offset)`` is the offset-sync store's translation (None = no
    syncs, negative = too old); ``rename`` maps an upstream topic to its downstream name.
    The store is only read: the caller records the result with :meth:`CheckpointStore.update`
    before publishing it.

    Raises ValueError if two upstream partitions rename to the same downstream partition (e.g.
    ``t`` and ``<target>.<source>.t``).  Java MM2 fails the whole poll in that case; raising lets
    the caller skip just this group instead of publishing two contradictory checkpoints.
    """
    result: dict[TopicPartitionKey, Checkpoint] = {}
    origin: dict[TopicPartitionKey, TopicPartitionKey] = {}
    for (topic, partition), entry in committed.items():
        if not accepts_topic(topic):
            continue
        if entry is None:
            continue
        upstream_offset, metadata = entry
        downstream_offset = translate(topic, partition, upstream_offset)
        if downstream_offset is None:
            continue
        checkpoint = Checkpoint(
            group, rename(topic), partition, upstream_offset, downstream_offset, metadata
        )
        if downstream_offset < 0:
            continue
        last = store.get(group, checkpoint.topic, partition)
        if not is_more_recent(checkpoint, last):
            continue
        key = checkpoint.topic_partition
        if key in result:
            raise ValueError(
                f"group {group!r}: upstream partitions {origin[key][0]}-{origin[key][1]} and "
                f"{topic}-{partition} both map to downstream partition {key[0]}-{key[1]}"
            )
        result[key] = checkpoint
        origin[key] = (topic, partition)
    return list(result.values())


def plan_group_offset_sync(
    checkpoints_by_tp: Mapping[TopicPartitionKey, Checkpoint],
    target_offsets: Mapping[TopicPartitionKey, int | None] | None,
) -> dict[TopicPartitionKey, tuple[int, str]]:
    """Offsets (with metadata) to write into one target group, keyed by downstream partition.

    ``target_offsets`` is None when the group was not seen idle (EMPTY) on the target: then
    everything is written and, for a group with live members, the broker's rejection is what
    protects it.  Otherwise a partition is written only if the target has no offset for it (or a
    null one) or a smaller one: an existing target position never moves backwards.  An empty
    result means there is nothing to write.
    """
    if target_offsets is None:
        return {
            tp: (cp.downstream_offset, cp.metadata) for tp, cp in checkpoints_by_tp.items()
        }
    plan: dict[TopicPartitionKey, tuple[int, str]] = {}
    for tp, cp in checkpoints_by_tp.items():
        current = target_offsets.get(tp)
        if current is not None and current >= cp.downstream_offset:
            continue
        plan[tp] = (cp.downstream_offset, cp.metadata)
    return plan
