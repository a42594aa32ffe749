"""The Spark path's metrics and client settings, as pure code: record age from a
micro-batch's summary (the names the replicator's fetches feed), and the target's record
size limit carried to librdkafka."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from mirrorline.core.rejects import rejected_record
from mirrorline.kafka.rdkafka import rdkafka_consumer_config, rdkafka_producer_config
from mirrorline.telemetry.replication import ReplicationMetrics


def gauges(reader: InMemoryMetricReader) -> dict[str, float]:
    data = reader.get_metrics_data()
    assert data is not None
    return {m.name: float(m.data.data_points[0].value)  # type: ignore[union-attr]
            for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
            if m.data.data_points}


def test_a_spark_micro_batch_feeds_record_age_under_mm2_names() -> None:
    reader = InMemoryMetricReader()
    now = 1_700_000_100.0  # seconds
    metrics = ReplicationMetrics(MeterProvider(metric_readers=[reader]).get_meter("t"),
                                 clock=lambda: now)
    m = metrics.partition("a", "b", "a.t", 0)
    # 3 records stamped 1000..3000 ms before they were read; acknowledged 500 ms later.
    read_ms = now * 1000.0 - 500.0
    metrics.acknowledged_summary(m, 3, 30, int(read_ms - 3000), int(read_ms - 1000),
                                 int(read_ms - 1000), fetched_ms=read_ms)
    values = gauges(reader)
    assert values["record-age-ms-max"] == 3000.0
    assert values["record-age-ms-min"] == 1000.0
    assert values["record-age-ms-avg"] == 2000.0
    assert values["record-age-ms"] == 1000.0  # the last record's
    assert values["replication-latency-ms-max"] == 3500.0
    assert values["record-count"] == 3.0


def test_without_a_read_time_no_record_age_is_made_up() -> None:
    reader = InMemoryMetricReader()
    metrics = ReplicationMetrics(MeterProvider(metric_readers=[reader]).get_meter("t"),
                                 clock=lambda: 2_000_000.0)
    m = metrics.partition("a", "b", "a.t", 0)
    metrics.acknowledged_summary(m, 1, 1, 1000, 1000, 1000)
    assert "record-age-ms-max" not in gauges(reader)
    assert "replication-latency-ms-max" in gauges(reader)


def test_the_targets_record_size_limit_reaches_librdkafka() -> None:
    assert rdkafka_producer_config({"bootstrap.servers": "h:1", "max.request.size": "20000"})[
        "message.max.bytes"] == "20000"
    # librdkafka's floor is 1000 bytes; without the key librdkafka keeps its default.
    assert rdkafka_producer_config({"bootstrap.servers": "h:1", "max.request.size": "10"})[
        "message.max.bytes"] == "1000"
    assert "message.max.bytes" not in rdkafka_producer_config({"bootstrap.servers": "h:1"})


def test_the_spark_path_reads_transactions_as_the_workers_do() -> None:
    """librdkafka alone would read committed; the workers (and MM2's Java consumer) read
    uncommitted unless `isolation.level` says otherwise."""
    assert rdkafka_consumer_config({"bootstrap.servers": "h:1"})[
        "isolation.level"] == "read_uncommitted"
    assert rdkafka_consumer_config({"bootstrap.servers": "h:1",
                                    "isolation.level": "read_committed"})[
        "isolation.level"] == "read_committed"
    assert "isolation.level" not in rdkafka_producer_config({"bootstrap.servers": "h:1"})


def test_a_refused_record_is_named_the_same_way_on_every_path() -> None:
    assert rejected_record("target rejected the record: X", "a->b", "t", 1, 30, "a.t") == (
        "target rejected the record: X (flow a->b, topic 't', partition 1, offset 30 -> 'a.t')")


def test_progress_offsets_fall_back_from_a_null_latest_offset() -> None:
    from mirrorline_spark.executor.driver import _offsets

    # What PySpark 4.3 reports for a Python data source: latestOffset is the text "null".
    source = {"latestOffset": "null", "endOffset": '{"0:t": 50}'}
    assert (_offsets(source["latestOffset"]) or _offsets(source["endOffset"])) == {"0:t": 50}
    assert _offsets({"1:t": 7}) == {"1:t": 7}
    assert _offsets("not json") is None and _offsets(None) is None


def test_the_targets_codec_reaches_librdkafka() -> None:
    """`<target>.producer.compression.type` was dropped on the way to the Spark sink, which
    wrote uncompressed batches whatever it said (the workers compress as told)."""
    from confluent_kafka import Producer

    from mirrorline.core.errors import ConfigError

    for codec in ("lz4", "zstd", "snappy", "gzip"):
        config = rdkafka_producer_config({"bootstrap.servers": "127.0.0.1:9",
                                          "compression.type": codec.upper()})
        assert config["compression.type"] == codec
        Producer(config).flush(0)  # librdkafka takes it (the wheel has every codec)
    assert rdkafka_producer_config({"bootstrap.servers": "h:1"})["compression.type"] == "none"
    with pytest.raises(ConfigError, match=r"compression\.type"):
        rdkafka_producer_config({"bootstrap.servers": "h:1", "compression.type": "brotli"})
