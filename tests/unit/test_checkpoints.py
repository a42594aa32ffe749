"""Checkpoint computation, the checkpoint store and group-offset sync (MirrorCheckpointTask)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mirrorline.core.checkpoints import (
    CheckpointStore,
    TopicPartitionKey,
    compute_checkpoints,
    is_more_recent,
    plan_group_offset_sync,
)
from mirrorline.core.offset_sync_store import OffsetSyncStore
from mirrorline.core.wire import Checkpoint, OffsetSync

Committed = dict[TopicPartitionKey, tuple[int, str] | None]


def accept_all(topic: str) -> bool:
    return True


def prefix(topic: str) -> str:
    return f"source1.{topic}"


def sync_store(*syncs: tuple[str, int, int, int]) -> OffsetSyncStore:
    store = OffsetSyncStore()
    store.start_initial_read(False)
    for topic, partition, up, down in syncs:
        store.add(OffsetSync(topic, partition, up, down))
    store.finish_initial_read()
    return store


def compute(
    group: str,
    committed: Committed,
    translate: Callable[[str, int, int], int | None],
    store: CheckpointStore | None = None,
    *,
    rename: Callable[[str], str] = prefix,
    accepts_topic: Callable[[str], bool] = accept_all,
) -> list[Checkpoint]:
    return compute_checkpoints(
        group,
        committed,
        translate=translate,
        rename=rename,
        accepts_topic=accepts_topic,
        store=store if store is not None else CheckpointStore(),
    )


# -- CheckpointStore -------------------------------------------------------------------


def test_store_keeps_last_checkpoint_of_own_groups_and_skips_undecodable() -> None:
    first = Checkpoint("group1", "t1", 0, 0, 0)
    other = Checkpoint("group2", "t1", 0, 0, 0)
    last = Checkpoint("group1", "t1", 0, 1, 1)
    store = CheckpointStore(groups=["group1"])
    errors = store.load_raw([
        (first.encode_key(), first.encode_value()),
        (other.encode_key(), other.encode_value()),
        (b"", b""),
        (last.encode_key(), last.encode_value()),
    ])
    assert len(errors) == 1
    assert store.groups() == ["group1"]
    assert store.for_group("group1") == {("t1", 0): Checkpoint("group1", "t1", 0, 1, 1, "")}
    assert store.get("group2", "t1", 0) is None


def test_store_load_update_and_lookup() -> None:
    store = CheckpointStore()
    store.load([Checkpoint("g", "a", 0, 5, 5), Checkpoint("g", "a", 1, 7, 7),
                Checkpoint("h", "a", 0, 1, 1), Checkpoint("g", "a", 0, 6, 6)])
    assert store.get("g", "a", 0) == Checkpoint("g", "a", 0, 6, 6)
    assert store.get("g", "a", 2) is None
    assert store.get("missing", "a", 0) is None
    assert store.groups() == ["g", "h"]
    store.update([Checkpoint("g", "a", 1, 9, 8, "m"), Checkpoint("new", "b", 3, 1, 1)])
    assert store.get("g", "a", 1) == Checkpoint("g", "a", 1, 9, 8, "m")
    assert store.groups() == ["g", "h", "new"]
    assert store.has_group("new") and not store.has_group("nope")
    view = store.for_group("g")
    view.clear()  # a copy: the store is unaffected
    assert len(store.for_group("g")) == 2
    assert store.for_group("missing") == {}
    store.clear()
    assert store.groups() == []


# -- is_more_recent ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("new", "last", "expected"),
    [
        ((10, 5), None, True),  # first for the group or partition
        ((10, 6), (10, 5), True),  # downstream advanced
        ((10, 5), (10, 5), False),  # repeat
        ((11, 4), (10, 5), False),  # would rewind the downstream offset
        ((9, 4), (10, 5), True),  # upstream group rewound: follow it
        ((9, 5), (10, 5), True),
    ],
)
def test_is_more_recent(new: tuple[int, int], last: tuple[int, int] | None,
                        expected: bool) -> None:
    new_cp = Checkpoint("g", "t", 0, *new)
    last_cp = None if last is None else Checkpoint("g", "t", 0, *last)
    assert is_more_recent(new_cp, last_cp) is expected


# -- compute_checkpoints (MirrorCheckpointTask.checkpoint) -----------------------------------------


def test_pinned_translation_and_renaming() -> None:
    syncs = sync_store(("topic1", 2, 3, 4), ("target2.topic5", 6, 7, 8))

    def rename(topic: str) -> str:  # source1 -> target2, as MM2 renames
        return topic.removeprefix("target2.") if topic.startswith("target2.") else prefix(topic)

    def run(group: str, tp: TopicPartitionKey, offset: int) -> list[Checkpoint]:
        return compute(group, {tp: (offset, "")}, syncs.translate_downstream, rename=rename)

    assert run("group9", ("topic1", 2), 10) == [Checkpoint("group9", "source1.topic1", 2, 10, 5)]
    assert run("group11", ("target2.topic5", 6), 12) == [Checkpoint("group11", "topic5", 6, 12, 9)]
    assert run("group13", ("target2.topic5", 6), 7) == [Checkpoint("group13", "topic5", 6, 7, 8)]


def test_partition_without_syncs_gets_no_checkpoint() -> None:
    syncs = sync_store(("topic1", 0, 3, 4))
    assert compute("g", {("topic1", 1): (10, "")}, syncs.translate_downstream) == []
    assert compute("g", {("topic1", 0): (10, "")}, syncs.translate_downstream) == [
        Checkpoint("g", "source1.topic1", 0, 10, 5)
    ]


def test_null_offset_entry_gets_no_checkpoint() -> None:
    syncs = sync_store(("topic1", 0, 3, 4))
    assert compute("g", {("topic1", 0): None}, syncs.translate_downstream) == []


def test_rejected_topic_is_skipped_before_translation() -> None:
    asked: list[tuple[str, int, int]] = []

    def translate(topic: str, partition: int, offset: int) -> int | None:
        asked.append((topic, partition, offset))
        return offset

    committed: Committed = {("keep", 0): (5, "m"), ("drop", 0): (6, "")}
    result = compute("g", committed, translate, accepts_topic=lambda t: t == "keep")
    assert result == [Checkpoint("g", "source1.keep", 0, 5, 5, "m")]
    assert asked == [("keep", 0, 5)]


def test_negative_translation_is_skipped() -> None:
    syncs = sync_store(("t", 0, 100, 200))
    assert compute("g", {("t", 0): (50, "")}, syncs.translate_downstream) == []


def test_not_ready_store_translates_nothing() -> None:
    syncs = OffsetSyncStore()
    syncs.start_initial_read(False)
    syncs.add(OffsetSync("t", 0, 1, 1))
    assert compute("g", {("t", 0): (5, "")}, syncs.translate_downstream) == []


def test_metadata_and_order_are_kept() -> None:
    committed: Committed = {("b", 1): (3, "x"), ("a", 0): (4, "y"), ("c", 2): None}
    result = compute("g", committed, lambda t, p, o: o + 100)
    assert result == [Checkpoint("g", "source1.b", 1, 3, 103, "x"),
                      Checkpoint("g", "source1.a", 0, 4, 104, "y")]


def test_monotonic_against_the_store() -> None:
    store = CheckpointStore()
    store.update([Checkpoint("g", "source1.t", 0, 100, 50)])

    def run(offset: int, downstream: int) -> list[Checkpoint]:
        return compute("g", {("t", 0): (offset, "")}, lambda t, p, o: downstream, store)

    assert run(100, 50) == []  # repeat
    assert run(120, 49) == []  # would go backwards downstream
    assert run(120, 51) == [Checkpoint("g", "source1.t", 0, 120, 51)]
    assert run(90, 40) == [Checkpoint("g", "source1.t", 0, 90, 40)]  # upstream rewind
    # The store is only read: the caller records what it publishes.
    assert store.get("g", "source1.t", 0) == Checkpoint("g", "source1.t", 0, 100, 50)
    # Other groups are unaffected by this group's history.
    other = compute("h", {("t", 0): (100, "")}, lambda t, p, o: 50, store)
    assert other == [Checkpoint("h", "source1.t", 0, 100, 50)]


def test_restart_scenario() -> None:
    # Old checkpoint 250 -> 201 loaded; the rebuilt history retains {175, 375, 475}.
    syncs = sync_store(*[("t1", 0, o, o) for o in (175, 275, 375, 475)])
    store = CheckpointStore(groups=["group1"])
    store.load([Checkpoint("group1", "source1.t1", 0, 250, 201)])

    def run(offset: int) -> list[Checkpoint]:
        return compute("group1", {("t1", 0): (offset, "")}, syncs.translate_downstream, store)

    assert run(250) == []  # 176 < 201
    assert run(370) == []  # 176 < 201
    assert run(400) == [Checkpoint("group1", "source1.t1", 0, 400, 376, "")]


def test_colliding_downstream_names_raise() -> None:
    committed: Committed = {("t", 0): (1, ""), ("target2.source1.t", 0): (2, "")}

    def rename(topic: str) -> str:
        return topic.removeprefix("target2.") if topic.startswith("target2.") else prefix(topic)

    with pytest.raises(ValueError, match=r"source1\.t-0"):
        compute("g", committed, lambda t, p, o: o, rename=rename)


# -- plan_group_offset_sync (MirrorCheckpointTask.syncGroupOffset) ---------------------------------


def cps(**entries: tuple[int, int]) -> dict[TopicPartitionKey, Checkpoint]:
    return {(topic, 0): Checkpoint("g", topic, 0, up, down, f"m-{topic}")
            for topic, (up, down) in entries.items()}


def test_pinned_idle_groups_are_moved_forward() -> None:
    consumer1 = plan_group_offset_sync(cps(topic1=(200, 101)), {("topic1", 0): 100})
    consumer2 = plan_group_offset_sync(cps(topic2=(100, 51)), {("topic2", 0): 50})
    assert consumer1 == {("topic1", 0): (101, "m-topic1")}
    assert consumer2 == {("topic2", 0): (51, "m-topic2")}


def test_null_target_offset_is_synced() -> None:
    assert plan_group_offset_sync(cps(topic1=(200, 101)), {("topic1", 0): None}) == {
        ("topic1", 0): (101, "m-topic1")
    }


def test_never_moves_an_idle_group_backwards() -> None:
    checkpoints = cps(a=(10, 100), b=(10, 100), c=(10, 100))
    target = {("a", 0): 100, ("b", 0): 150, ("c", 0): 99}
    assert plan_group_offset_sync(checkpoints, target) == {("c", 0): (100, "m-c")}
    # Nothing to do: an empty plan.
    assert plan_group_offset_sync(cps(a=(10, 100)), {("a", 0): 100}) == {}


def test_partition_unknown_to_idle_group_is_synced() -> None:
    assert plan_group_offset_sync(cps(a=(10, 100), b=(5, 7)), {("a", 0): 500}) == {
        ("b", 0): (7, "m-b")
    }


def test_group_not_idle_gets_everything() -> None:
    checkpoints = cps(a=(10, 100), b=(5, 7))
    assert plan_group_offset_sync(checkpoints, None) == {
        ("a", 0): (100, "m-a"),
        ("b", 0): (7, "m-b"),
    }


# -- end to end with the real replication policy (source1 -> target2) ---------------------


def test_pinned_example_with_default_policy() -> None:
    from mirrorline.core.policy import DefaultReplicationPolicy, checkpoint_topic_name

    policy = DefaultReplicationPolicy()

    def rename(topic: str) -> str:
        return checkpoint_topic_name(policy, topic, source_alias="source1", target_alias="target2")

    syncs = sync_store(("topic1", 2, 3, 4), ("target2.topic5", 6, 7, 8),
                       ("source6.topic7", 0, 1, 1))
    store = CheckpointStore()
    committed: Committed = {
        ("topic1", 2): (10, ""),
        ("target2.topic5", 6): (12, ""),
        ("source6.topic7", 0): (1, "meta"),
    }
    result = compute_checkpoints("group9", committed, translate=syncs.translate_downstream,
                                 rename=rename, accepts_topic=accept_all, store=store)
    assert result == [
        Checkpoint("group9", "source1.topic1", 2, 10, 5),
        Checkpoint("group9", "topic5", 6, 12, 9),
        Checkpoint("group9", "source1.source6.topic7", 0, 1, 1, "meta"),
    ]
    group13 = compute_checkpoints("group13", {("target2.topic5", 6): (7, "")},
                                  translate=syncs.translate_downstream, rename=rename,
                                  accepts_topic=accept_all, store=store)
    assert group13 == [Checkpoint("group13", "topic5", 6, 7, 8)]
