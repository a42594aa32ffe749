"""The options of the Spark source and sink: one query carries several flows (feeds),
each with its own source and target cluster; a query of one flow may be written flat."""

from __future__ import annotations

import json

import pytest
from mirrorline_spark.options import SinkOptions, SourceOptions


def _feed(n: int) -> dict[str, object]:
    target = {"kafka": {"bootstrap.servers": "d:9092"}, "topics": {"t": f"c{n}.t"},
              "flow": f"c{n}->d"}
    return {"kafka": {"bootstrap.servers": f"h{n}:9092"}, "partitions": [["t", 0, 5 * n]],
            "topics": {"t": f"c{n}.t"}, "flow": f"c{n}->d", "target": target}


def test_a_query_of_several_flows_keeps_each_flows_clusters_and_partitions() -> None:
    options = {"feeds": json.dumps([_feed(1), _feed(2)]), "layout": "chunks"}
    source = SourceOptions.parse(options)
    assert [f.kafka["bootstrap.servers"] for f in source.feeds] == ["h1:9092", "h2:9092"]
    # The same topic and partition in two flows are two source partitions of the query.
    assert source.starts == {(0, "t", 0): 5, (1, "t", 0): 10}
    sink = SinkOptions.parse(options)
    assert [(f.flow, f.topics) for f in sink.feeds] == [("c1->d", {"t": "c1.t"}),
                                                        ("c2->d", {"t": "c2.t"})]
    # The read tasks copy on the batch path: each source feed knows its own target.
    assert [(f.target.flow, f.target.topics, f.target.kafka["bootstrap.servers"])
            for f in source.feeds if f.target is not None] == [
        ("c1->d", {"t": "c1.t"}, "d:9092"), ("c2->d", {"t": "c2.t"}, "d:9092")]


def test_a_query_of_one_flow_may_give_its_options_flat() -> None:
    feed = _feed(1)
    options = {k: json.dumps(v) for k, v in feed.items() if k != "flow"} | {"flow": "c1->d"}
    assert SourceOptions.parse(options).starts == {(0, "t", 0): 5}
    assert SinkOptions.parse(options).feeds[0].flow == "c1->d"


def test_rows_of_one_record_each_cannot_say_which_flow_they_belong_to() -> None:
    with pytest.raises(ValueError, match="several feeds needs layout 'chunks'"):
        SourceOptions.parse({"feeds": json.dumps([_feed(1), _feed(2)])})


@pytest.mark.parametrize(("feeds", "message"), [
    ("[]", "'feeds' must be a non-empty JSON list of objects"),
    ("{", "option 'feeds' is not valid JSON"),
    (json.dumps([{"kafka": {}}]), "feed 0: 'partitions' is required"),
    (json.dumps([_feed(1), _feed(2) | {"batchPath": "yes"}]),
     "feed 1: 'batchPath' must be auto, on or off, not 'yes'"),
    (json.dumps([_feed(1), {k: v for k, v in _feed(2).items() if k != "target"}]),
     "feed 1: 'target' is required where 'batchPath' is not off"),
    (json.dumps([_feed(1) | {"target": {"kafka": {}}}]),
     r"feed 0: 'topics' is required \(in 'target'\)"),
])
def test_bad_feeds_are_named(feeds: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SourceOptions.parse({"feeds": feeds, "layout": "chunks"})


def test_each_flow_copies_on_the_path_its_own_key_says() -> None:
    """The batch path is the default; `off` (the flow's mirrorline.batch.path) keeps the
    record path for that flow only."""
    options = {"feeds": json.dumps([_feed(1), _feed(2) | {"batchPath": "off"}]),
               "layout": "chunks"}
    assert [f.batch_path for f in SourceOptions.parse(options).feeds] == ["auto", "off"]
    assert [f.batch_path for f in SinkOptions.parse(options).feeds] == ["auto", "off"]


def test_a_micro_batch_groups_each_feeds_copying_ranges_into_at_most_read_tasks() -> None:
    """Batch-path feeds: at most `readTasks` read tasks per feed, of about as many records
    each, every range in exactly one; a record-path feed reads a task per range."""
    from mirrorline_spark.source import KafkaRange, KafkaRanges, KafkaStreamReader

    feeds = [_feed(1) | {"partitions": [["t", p, 0] for p in range(5)]},
             _feed(2) | {"partitions": [["t", p, 0] for p in range(3)], "batchPath": "off"},
             _feed(3) | {"partitions": [["u", 0, 0]]}]
    reader = KafkaStreamReader(SourceOptions.parse(
        {"feeds": json.dumps(feeds), "layout": "chunks", "readTasks": "2"}))
    start = reader.initialOffset()
    sizes = {0: 100, 1: 10, 2: 40, 3: 50, 4: 0}  # partition 4 has nothing to copy
    end = {k: start[k] + sizes.get(int(k.split(":")[1]), 0) for k in start}
    planned = reader.partitions(start, end)
    groups = [p for p in planned if isinstance(p, KafkaRanges)]
    assert [(g.feed, [(t, p, e - s) for t, p, s, e in g.ranges]) for g in groups] == [
        (0, [("t", 0, 100)]), (0, [("t", 1, 10), ("t", 2, 40), ("t", 3, 50)]),
        (2, [("u", 0, 100)])]
    singles = [p for p in planned if isinstance(p, KafkaRange)]
    assert [(r.feed, r.partition) for r in singles] == [(1, 0), (1, 1), (1, 2)]
    # Without readTasks, a task per range, as Spark's own sources plan.
    reader = KafkaStreamReader(SourceOptions.parse(
        {"feeds": json.dumps(feeds), "layout": "chunks"}))
    assert sum(1 for p in reader.partitions(start, end) if isinstance(p, KafkaRanges)) == 5
    reader.stop()


@pytest.mark.parametrize("tasks", ["0", "two", "-1"])
def test_read_tasks_must_be_a_positive_whole_number(tasks: str) -> None:
    with pytest.raises(ValueError, match=f"option 'readTasks' must be a whole number of at "
                                         f"least 1, not '{tasks}'"):
        SourceOptions.parse({"feeds": json.dumps([_feed(1)]), "layout": "chunks",
                             "readTasks": tasks})
