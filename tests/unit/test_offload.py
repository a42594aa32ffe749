"""Where partitions run: the offload policy, its flow properties, the operator's pins in the
control log, and the assignment across the two pools (workers and Spark executors)."""

from __future__ import annotations

import pytest

from mirrorline.core.assignment import PartitionKey
from mirrorline.core.config import parse_config
from mirrorline.core.control import ControlState, Ownership, replay
from mirrorline.core.errors import ConfigError
from mirrorline.core.offload import Load, OffloadPolicy, OffloadSettings
from mirrorline.core.reconcile import WorkerReport, plan
from mirrorline.v1 import control_pb2, flows_pb2, spark_pb2

FLOW = "a->b"
K0, K1 = PartitionKey(FLOW, "t", 0), PartitionKey(FLOW, "t", 1)
AUTO = OffloadSettings("auto", offload_bytes_per_second=1000, sustain_s=10,
                       offload_lag_records=500, reclaim_lag_records=50)


def decide(policy: OffloadPolicy, now: float, loads: dict[PartitionKey, Load], *,
           settings: OffloadSettings = AUTO, on_spark: set[PartitionKey] | None = None,
           pins: dict[tuple[str, str, int], str] | None = None,
           alive: bool = True) -> set[PartitionKey]:
    return policy.decide(now, [K0, K1], {FLOW: settings}, loads, pins or {},
                         on_spark or set(), alive)


def test_a_rate_above_the_threshold_offloads_only_once_it_is_sustained() -> None:
    policy = OffloadPolicy()
    hot = {K0: Load(5000, 0), K1: Load(10, 0)}
    assert decide(policy, 0, hot) == set()
    assert decide(policy, 9, hot) == set()
    assert decide(policy, 10, hot) == {K0}
    # A dip below the threshold restarts the clock.
    assert decide(policy, 11, {K0: Load(10, 0)}) == set()
    assert decide(policy, 12, hot) == set()
    assert decide(policy, 22, hot) == {K0}


def test_lag_thresholds_have_hysteresis() -> None:
    policy = OffloadPolicy()
    assert decide(policy, 0, {K0: Load(0, 501)}) == {K0}
    # On Spark, the backlog shrinks: it stays until below the reclaim threshold.
    assert decide(policy, 1, {K0: Load(0, 200)}, on_spark={K0}) == {K0}
    assert decide(policy, 2, {K0: Load(0, 50)}, on_spark={K0}) == {K0}
    # Light again, but the rate must also have been quiet for the sustain period.
    assert decide(policy, 3, {K0: Load(0, 49)}, on_spark={K0}) == {K0}
    assert decide(policy, 10, {K0: Load(0, 49)}, on_spark={K0}) == set()
    # Not on Spark, 200 records of backlog is not heavy.
    assert decide(policy, 11, {K0: Load(0, 200)}) == set()
    # Unknown lag never counts as light.
    assert decide(policy, 12, {K0: Load(0, -1)}, on_spark={K0}) == {K0}


def test_a_partition_offloaded_for_its_rate_returns_after_a_sustained_quiet_period() -> None:
    policy = OffloadPolicy()
    assert decide(policy, 0, {K0: Load(5000, 0)}) == set()
    assert decide(policy, 10, {K0: Load(5000, 0)}) == {K0}
    assert decide(policy, 11, {K0: Load(10, 0)}, on_spark={K0}) == {K0}
    assert decide(policy, 20, {K0: Load(10, 0)}, on_spark={K0}) == {K0}
    assert decide(policy, 21, {K0: Load(10, 0)}, on_spark={K0}) == set()


def test_operator_pins_beat_measurements_and_whole_flow_settings_beat_pins() -> None:
    policy = OffloadPolicy()
    quiet: dict[PartitionKey, Load] = {}
    assert decide(policy, 0, quiet, pins={(FLOW, "t", 1): "spark"}) == {K1}
    assert decide(policy, 0, quiet, pins={(FLOW, "t", -1): "spark"}) == {K0, K1}
    # A partition's own pin wins over its topic's.
    assert decide(policy, 0, quiet, pins={(FLOW, "t", -1): "spark",
                                          (FLOW, "t", 0): "workers"}) == {K1}
    assert decide(policy, 0, {K0: Load(0, 10**9)}, pins={(FLOW, "t", 0): "workers"}) == set()
    spark = OffloadSettings("spark")
    assert decide(policy, 0, quiet, settings=spark,
                  pins={(FLOW, "t", 0): "workers"}) == {K0, K1}
    workers = OffloadSettings("workers")
    assert decide(policy, 0, {K0: Load(0, 10**9)}, settings=workers,
                  pins={(FLOW, "t", 0): "spark"}) == set()


def test_nothing_is_offloaded_without_a_live_executor() -> None:
    policy = OffloadPolicy()
    assert decide(policy, 0, {K0: Load(0, 10**9)}, alive=False) == set()
    assert decide(policy, 0, {}, settings=OffloadSettings("spark"), alive=False) == set()


def test_zero_thresholds_disable_their_criterion() -> None:
    policy = OffloadPolicy()
    off = OffloadSettings("auto", 0, 0, 0, 0)
    assert decide(policy, 0, {K0: Load(10**9, 10**9)}, settings=off) == set()
    assert decide(policy, 100, {K0: Load(10**9, 10**9)}, settings=off) == set()


# -- flow properties ----------------------------------------------------------------------
BASE = ("clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
        "a->b.enabled = true\n")


def test_the_flow_properties_are_read_and_validated() -> None:
    flow = parse_config(BASE + "a->b.mirrorline.executor = spark\n"
                               "mirrorline.spark.offload.lag.records = 100\n"
                               "mirrorline.spark.reclaim.lag.records = 10\n"
                               "mirrorline.spark.offload.bytes.per.second = 1\n"
                               "mirrorline.spark.offload.sustain.seconds = 5\n").flows["a->b"]
    assert flow.offload == OffloadSettings("spark", 1, 5, 100, 10)
    assert parse_config(BASE).flows["a->b"].offload == OffloadSettings()
    with pytest.raises(ConfigError, match=r"mirrorline\.executor.*workers or spark or auto"):
        parse_config(BASE + "mirrorline.executor = gpu\n")
    with pytest.raises(ConfigError,
                       match=r"must be below mirrorline\.spark\.offload\.lag\.records"):
        parse_config(BASE + "mirrorline.spark.offload.lag.records = 100\n"
                            "mirrorline.spark.reclaim.lag.records = 100\n")
    with pytest.raises(ConfigError, match=r"offload\.bytes\.per\.second"):
        parse_config(BASE + "mirrorline.spark.offload.bytes.per.second = fast\n")


# -- the operator's word in the control log -------------------------------------------------
def _record(**event: object) -> control_pb2.ControlRecord:
    return control_pb2.ControlRecord(epoch=1, controller_id="c", **event)  # type: ignore[arg-type]


def test_placements_replay_and_a_topic_wide_word_replaces_partition_pins() -> None:
    claim = control_pb2.ControlRecord(epoch=1, controller_id="c",
                                      leader_claimed=control_pb2.LeaderClaimed(address="c:1"))
    created = _record(flow_created=control_pb2.FlowCreated(
        spec=flows_pb2.FlowSpec(source="a", target="b")))

    def placed(partition: int, executor: str, flow: str = FLOW) -> control_pb2.ControlRecord:
        return _record(partitions_placed=spark_pb2.PartitionsPlaced(
            flow=flow, topic="t", partition=partition, executor=executor))

    state = replay(enumerate([claim, created, placed(1, "spark"), placed(2, "spark")]))
    assert state.placements == {(FLOW, "t", 1): "spark", (FLOW, "t", 2): "spark"}
    state = replay(enumerate([claim, created, placed(1, "spark"), placed(-1, "workers")]))
    assert state.placements == {(FLOW, "t", -1): "workers"}
    state = replay(enumerate([claim, created, placed(1, "spark"), placed(1, "")]))
    assert state.placements == {}
    state = ControlState()
    for offset, record in enumerate([claim, placed(1, "spark", flow="x->y"),
                                     placed(1, "gpu")]):
        state.apply(offset, record)
    assert state.placements == {}


# -- two pools --------------------------------------------------------------------------
def _state(owners: dict[PartitionKey, str]) -> ControlState:
    state = ControlState(epoch=1, leader_id="c")
    state.owners = {k: Ownership(w, "a.t", 1) for k, w in owners.items()}
    return state


def test_partitions_for_spark_go_to_an_executor_and_the_rest_to_workers() -> None:
    want = {K0: "a.t", K1: "a.t"}
    result = plan(ControlState(epoch=1, leader_id="c"), want, {"w1", "spark:x"}, {}, {},
                  expired=(), allow_moves=False, spark={"spark:x"}, on_spark={K1})
    assert result.grant == {(FLOW, "w1"): {K0: "a.t"}, (FLOW, "spark:x"): {K1: "a.t"}}


def test_moving_between_pools_is_fenced_like_any_move() -> None:
    want = {K0: "a.t", K1: "a.t"}
    state = _state({K0: "w1", K1: "w1"})
    reports = {"w1": WorkerReport(1, frozenset({K0, K1}))}
    result = plan(state, want, {"w1", "spark:x"}, reports, {}, expired=(),
                  allow_moves=False, spark={"spark:x"}, on_spark={K1})
    assert result.revoke == {(FLOW, "w1"): {K1: "a.t"}} and not result.grant
    # Back: the executor releases first too.
    state = _state({K0: "w1", K1: "spark:x"})
    result = plan(state, want, {"w1", "spark:x"}, reports, {}, expired=(),
                  allow_moves=False, spark={"spark:x"}, on_spark=set())
    assert result.revoke == {(FLOW, "spark:x"): {K1: "a.t"}} and not result.grant


def test_an_executor_whose_query_failed_gives_its_partitions_back_and_gets_none() -> None:
    want = {K0: "a.t", K1: "a.t"}
    state = _state({K0: "spark:x", K1: "spark:x"})
    result = plan(state, want, {"w1", "spark:x"}, {}, {}, expired=(), allow_moves=False,
                  spark={"spark:x"}, on_spark=set(), spark_unable={"spark:x"})
    assert result.revoke == {(FLOW, "spark:x"): {K0: "a.t", K1: "a.t"}}
    fresh = plan(ControlState(epoch=1, leader_id="c"), want, {"w1", "spark:x"}, {}, {},
                 expired=(), allow_moves=False, spark={"spark:x"}, on_spark={K0},
                 spark_unable={"spark:x"})
    assert fresh.grant == {(FLOW, "w1"): {K0: "a.t", K1: "a.t"}}


def test_spark_executors_never_get_partitions_meant_for_workers() -> None:
    result = plan(ControlState(epoch=1, leader_id="c"), {K0: "a.t"}, {"w1", "spark:x"}, {},
                  {}, expired=(), allow_moves=True, spark={"spark:x"}, on_spark=set())
    assert result.grant == {(FLOW, "w1"): {K0: "a.t"}}


def test_status_and_workers_show_spark_owners_batches_and_the_ui() -> None:
    from mirrorline.cli.admin_format import format_status, format_workers
    from mirrorline.v1 import admin_pb2

    report = admin_pb2.StatusReport(partitions=[
        flows_pb2.PartitionStatus(flow=FLOW, source_topic="t", partition=0,
                                  worker_id="spark:x1", micro_batch_ms=812.0,
                                  records_per_second=52000.0,
                                  state=flows_pb2.PARTITION_STATE_RUNNING),
        flows_pb2.PartitionStatus(flow=FLOW, source_topic="t", partition=1, worker_id="w1")])
    text = format_status(report)
    spark_table = text.split("ON SPARK")[1]
    assert "spark:x1" in spark_table and "812" in spark_table and "w1" not in spark_table
    workers = admin_pb2.ListWorkersResponse(workers=[
        admin_pb2.Worker(worker_id="spark:x1", kind="spark", ui_address="http://h:4040",
                         problem="Spark query failed: boom"),
        admin_pb2.Worker(worker_id="w1", kind="replicator")])
    lines = format_workers(workers, now_ms=0).splitlines()
    assert lines[-1] == ("spark:x1: Spark executor, UI http://h:4040; gave its partitions "
                         "back: Spark query failed: boom")


def test_a_partition_between_owners_keeps_its_place_until_it_is_reported_again() -> None:
    """Nobody reports a partition while it moves: it must not bounce back for lack of
    measurements (its load is unknown, not zero)."""
    policy = OffloadPolicy()
    assert decide(policy, 0, {K0: Load(5000, 0), K1: Load(0, 501)}) == {K1}
    assert decide(policy, 10, {K0: Load(5000, 0), K1: Load(0, 501)}) == {K0, K1}
    # Released by the worker, not yet running on Spark: no reports.
    assert decide(policy, 11, {}) == {K0, K1}
    assert decide(policy, 15, {}, on_spark={K0, K1}) == {K0, K1}
    # Reported again (by Spark), still heavy: the rate clock did not restart meanwhile.
    assert decide(policy, 16, {K0: Load(5000, -1), K1: Load(0, 400)},
                  on_spark={K0, K1}) == {K0, K1}
    # A partition never seen heavy stays with the workers when unreported.
    fresh = OffloadPolicy()
    assert decide(fresh, 0, {}) == set()
