"""A Spark micro-batch's acknowledgements, through the same bookkeeping as the replicator:
runs of where records landed, the offset syncs MM2's rule makes of them, and the checks
made before the executor starts (pure parts; Spark itself runs in the integration tests)."""

from __future__ import annotations

import pytest
from mirrorline_spark.acks import PartitionAcks
from mirrorline_spark.executor import preflight
from mirrorline_spark.options import offset_key, parse_offset_key

from mirrorline.core.acked_runs import offset_runs, run_offsets
from mirrorline.core.errors import ConfigError
from mirrorline.core.offset_syncs import OffsetSyncPlanner


def test_contiguous_acknowledgements_are_one_run() -> None:
    assert offset_runs(list(range(10, 20)), list(range(100, 110))) == [(10, 10, 100)]
    assert offset_runs([], []) == []


def test_runs_are_cut_where_either_side_jumps() -> None:
    # Another producer wrote to the target partition between 102 and 110; the source
    # has a gap (a transaction marker) after offset 14.
    up = [10, 11, 12, 13, 14, 16, 17]
    down = [100, 101, 102, 110, 111, 112, 113]
    runs = offset_runs(up, down)
    assert runs == [(10, 3, 100), (13, 2, 110), (16, 2, 112)]
    assert [o for r in runs for o in run_offsets(r)] == up


def test_acknowledgements_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match="out of order"):
        offset_runs([1, 2, 3], [10, 12, 11])
    with pytest.raises(ValueError, match="out of order"):
        offset_runs([1, 3, 2], [10, 11, 12])
    with pytest.raises(ValueError, match="3 upstream offsets but 2"):
        offset_runs([1, 2, 3], [10, 11])


def test_a_micro_batch_gives_the_same_offset_syncs_as_records_acknowledged_one_by_one() -> None:
    """The executor feeds each run to the planner the replicator uses: same syncs."""
    up = [0, 1, 2, 3, 4, 5, 6, 8, 9, 10]
    down = [0, 1, 2, 3, 7, 8, 9, 10, 11, 12]
    batched = OffsetSyncPlanner(2)
    for run in offset_runs(up, down):
        batched.queue_batch("t", 0, run_offsets(run), run[2])
    single = OffsetSyncPlanner(2)
    for u, d in zip(up, down, strict=True):
        single.queue("t", 0, u, d)
    batched.promote_delayed()
    single.promote_delayed()
    assert batched.take_pending(100) == single.take_pending(100)


def test_commit_messages_survive_their_json_round_trip() -> None:
    acks = PartitionAcks("t:x", 3, "a.t:x", [(5, 2, 9)], None, 40, 1, 2, 2)
    assert acks.records == 2
    from dataclasses import asdict
    assert PartitionAcks.from_json(asdict(acks)) == acks
    assert parse_offset_key(offset_key(1, "t:x", 3)) == (1, "t:x", 3)


@pytest.mark.parametrize("master", ["local", "local[*]", "local[2]", "local[2,3]",
                                    "spark://h:7077", "spark://h1:7077,h2:7077",
                                    "k8s://https://api:6443", "yarn"])
def test_master_urls_spark_accepts(master: str) -> None:
    assert preflight.check_master(master) == master


@pytest.mark.parametrize("master", ["", "local[x]", "spark:/h", "mesos://h:5050", "h:7077"])
def test_unknown_master_urls_are_configuration_errors(master: str) -> None:
    with pytest.raises(ConfigError, match="not a Spark master URL"):
        preflight.check_master(master)


def test_spark_conf_entries_must_be_spark_settings() -> None:
    assert preflight.parse_spark_conf(["spark.a=1", "spark.b= x=y"]) == {"spark.a": "1",
                                                                         "spark.b": " x=y"}
    with pytest.raises(ConfigError, match="'novalue' is not KEY=VALUE"):
        preflight.parse_spark_conf(["novalue"])
    with pytest.raises(ConfigError, match=r"'executor\.memory' is not a Spark setting"):
        preflight.parse_spark_conf(["executor.memory=2g"])
    assert preflight.parse_spark_conf(["spark.submit.deployMode=client"])
    with pytest.raises(ConfigError, match="deployMode=cluster is not supported: the "
                                          "executor is the Spark driver itself"):
        preflight.parse_spark_conf(["spark.submit.deployMode=cluster"])


def test_a_java_home_without_java_is_named(tmp_path: object, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(ConfigError, match="has no executable bin/java"):
        preflight.java_executable()


async def test_an_unreachable_standalone_master_is_reported() -> None:
    with pytest.raises(ConfigError, match="unreachable"):
        await preflight.check_reachable("spark://127.0.0.1:1", timeout=2)


def test_chunks_carry_records_unchanged() -> None:
    import pyarrow as pa
    from mirrorline_spark.records import ARROW_SCHEMA, from_chunks, to_chunk

    batch = pa.RecordBatch.from_arrays([
        pa.array(["t", "t"]), pa.array([3, 3], pa.int32()), pa.array([7, 9], pa.int64()),
        pa.array([b"k", None], pa.binary()), pa.array([None, b"v"], pa.binary()),
        pa.array([1, 2], pa.int64()),
        pa.array([[("h", b"1"), ("h", None)], []], ARROW_SCHEMA.field("headers").type)],
        schema=ARROW_SCHEMA)
    chunk = to_chunk(batch, 2, "t", 3)
    assert chunk.to_pydict()["first_offset"] == [7] and chunk.to_pydict()["records"] == [2]
    assert [(f, b.to_pylist()) for f, b, _, _ in from_chunks(chunk)] == [(2, batch.to_pylist())]


def test_a_read_task_that_copied_hands_its_acknowledgements_on_whole() -> None:
    """On the batch path the read task copies and its row carries what landed where: the
    sink's commit gets the same runs, error, copy path and metrics the task measured."""
    import pyarrow as pa
    from mirrorline_spark.acks import PartitionAcks
    from mirrorline_spark.records import acks_row, from_chunks

    acks = PartitionAcks("t", 3, "c.t", [(7, 5, 100), (13, 2, 105)],
                         "target rejected the record: ... offset 15", value_bytes=7000,
                         min_timestamp=1, max_timestamp=9, last_timestamp=8,
                         fetched_ms=1.5e12, flow="c->d", copy_path="batches",
                         copy_path_reason="mirrorline.batch.path = on")
    row = acks_row(1, acks)
    assert row.to_pydict()["first_offset"] == [7] and row.to_pydict()["records"] == [7]
    rows = pa.Table.from_batches([row, acks_row(0, PartitionAcks("u", 0, "c.u"))]) \
        .combine_chunks().to_batches()
    assert [(f, a) for f, a, _, _ in from_chunks(rows[0])] == [
        (1, acks), (0, PartitionAcks("u", 0, "c.u"))]


def test_acknowledgements_of_a_flow_the_executor_does_not_run_fail_the_micro_batch(
        tmp_path: object) -> None:
    """Nothing is recorded and the micro-batch fails (so it is copied again from recorded
    progress) rather than acknowledgements being dropped unseen. No Spark is started: the
    driver object only holds its thread."""
    from mirrorline_spark.executor.driver import SparkDriver
    from mirrorline_spark.executor.holds import Holds
    from mirrorline_spark.executor.query import ExecutorQuery

    query = ExecutorQuery(SparkDriver("local[1]", {}, "t"), {}, worker_id="spark:0",
                          workdir=str(tmp_path), holds=Holds())
    acks = [PartitionAcks("t", 0, "a.t", [(0, 2, 0)], flow="a->b")]
    assert query._on_batch(7, acks) == ("refused micro-batch 7: acknowledgements of "
                                        "partitions the running query does not copy "
                                        "('a->b' 't'-0)")


def test_a_flow_that_cannot_start_is_held_back_longer_after_each_failure() -> None:
    """One query copies every flow: a flow whose cluster does not answer is left out and
    tried again later, each retry (a query restart) further apart, up to a minute."""
    from mirrorline_spark.executor.holds import FIRST_S, MAX_S, Holds

    now = [100.0]
    holds = Holds(clock=lambda: now[0])
    assert not holds.held("a->b")
    delays = [holds.failed("a->b") for _ in range(6)]
    assert delays == [FIRST_S, 2 * FIRST_S, 4 * FIRST_S, 8 * FIRST_S, MAX_S, MAX_S]
    assert holds.held("a->b") and not holds.held("c->d")
    now[0] += MAX_S
    assert not holds.held("a->b")  # due for a retry
    holds.started("a->b")
    assert holds.failed("a->b") == FIRST_S  # a success starts the delays over


def test_spark_listens_on_the_bind_address_with_its_ui_off_by_default() -> None:
    """Issue 19: on loopback without TLS (a developer's machine) Spark binds its driver and
    block manager to --bind and keeps its UI off; the operator's settings win."""
    conf = preflight.network_conf({}, master="local[2]", bind="127.0.0.1", tls=False,
                                  insecure=False)
    assert conf == {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1",
                    "spark.ui.enabled": "false", "spark.ui.killEnabled": "false"}
    mine = preflight.network_conf({"spark.ui.enabled": "true", "spark.driver.host": "h"},
                                  master="local[2]", bind="127.0.0.1", tls=False,
                                  insecure=False)
    assert mine["spark.ui.enabled"] == "true" and mine["spark.driver.host"] == "h"
    assert mine["spark.ui.killEnabled"] == "false"


@pytest.mark.parametrize(("bind", "tls"), [("127.0.0.1", True), ("192.0.2.2", False),
                                           ("0.0.0.0", True)])
def test_spark_authenticates_and_encrypts_under_tls_or_off_loopback(bind: str,
                                                                    tls: bool) -> None:
    conf = preflight.network_conf({}, master="local[*]", bind=bind, tls=tls, insecure=False)
    assert {k: conf[k] for k in ("spark.authenticate", "spark.network.crypto.enabled",
                                 "spark.io.encryption.enabled")} == dict.fromkeys(
        ("spark.authenticate", "spark.network.crypto.enabled", "spark.io.encryption.enabled"),
        "true")
    assert conf["spark.driver.bindAddress"] == bind
    assert "spark.authenticate.secret" not in conf  # Spark makes it, in memory
    assert ("spark.driver.host" in conf) == (bind != "0.0.0.0")


def test_unauthenticated_spark_under_tls_is_refused_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"^--spark-conf: spark.authenticate=false is "
                                          r"refused because the deployment's gRPC uses TLS"):
        preflight.network_conf({"spark.authenticate": "false"}, master="local[2]",
                               bind="127.0.0.1", tls=True, insecure=False)
    # mirrorline.grpc.insecure = true accepts it, as it does for gRPC.
    assert preflight.network_conf({"spark.authenticate": "false"}, master="local[2]",
                                  bind="127.0.0.1", tls=True,
                                  insecure=True)["spark.authenticate"] == "false"
    with pytest.raises(ConfigError, match="standalone cluster needs its shared secret"):
        preflight.network_conf({}, master="spark://m:7077", bind="192.0.2.2", tls=True,
                               insecure=False)
    shared = preflight.network_conf({"spark.authenticate.secret": "s"},
                                    master="spark://m:7077", bind="192.0.2.2", tls=True,
                                    insecure=False)
    assert shared["spark.authenticate"] == "true"
