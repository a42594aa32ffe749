"""Pure logic of the heartbeat service: MM2 heartbeat bytes, topology paths, canary
accounting, the audit checksum, window completion and verdicts."""

from __future__ import annotations

import itertools
import json

import pytest

from mirrorline.core import record_audit as audit
from mirrorline.core.canary import (
    CanaryRecord,
    FlowCanary,
    Health,
    fold_arrival,
    new_partition_state,
    percentile,
)
from mirrorline.core.errors import WireFormatError
from mirrorline.core.filters import TopicFilter, should_replicate_topic
from mirrorline.core.policy import DefaultReplicationPolicy, IdentityReplicationPolicy
from mirrorline.core.record_audit import Side, Verdict
from mirrorline.core.topology import heartbeat_paths
from mirrorline.core.wire import Heartbeat

# --- heartbeats (worked example) ---------------------------------------------------

KEY_HEX = "0007" "7072696d617279" "0006" "6261636b7570"  # "primary", "backup"
VALUE_HEX = "0000" + "0000018bcfe56800"


def test_heartbeat_encodes_to_the_spec_bytes() -> None:
    beat = Heartbeat("primary", "backup", 1_700_000_000_000)
    assert beat.encode_key().hex() == KEY_HEX
    assert beat.encode_value().hex() == VALUE_HEX
    assert len(beat.encode_key()) == 17 and len(beat.encode_value()) == 10


def test_heartbeat_decodes_the_spec_bytes() -> None:
    beat = Heartbeat.decode(bytes.fromhex(KEY_HEX), bytes.fromhex(VALUE_HEX))
    assert beat == Heartbeat("primary", "backup", 1_700_000_000_000)


def test_truncated_heartbeat_is_an_error() -> None:
    with pytest.raises(WireFormatError):
        Heartbeat.decode(bytes.fromhex(KEY_HEX), bytes.fromhex(VALUE_HEX)[:6])


# --- topology ---------------------------------------------------------------------------------

POLICY = DefaultReplicationPolicy()
NOW = 1_000_000


def test_paths_give_route_and_hops_multi_hop() -> None:
    newest = {"heartbeats": NOW, "B.heartbeats": NOW - 100, "B.A.heartbeats": NOW - 300,
              "orders": None}
    paths = {p.topic: p for p in heartbeat_paths(POLICY, "C", newest, now_ms=NOW,
                                                  stale_after_ms=5000)}
    assert set(paths) == {"B.heartbeats", "B.A.heartbeats"}
    two = paths["B.A.heartbeats"]
    assert (two.origin, two.route, two.hops, two.age_ms, two.stale) == ("A", ("A", "B"), 2,
                                                                       300, False)
    assert (paths["B.heartbeats"].origin, paths["B.heartbeats"].hops) == ("B", 1)


def test_cycles_are_excluded() -> None:
    newest = {"B.C.heartbeats": NOW, "A.B.A.heartbeats": NOW, "B.heartbeats": NOW}
    paths = heartbeat_paths(POLICY, "C", newest, now_ms=NOW, stale_after_ms=5000)
    assert [p.topic for p in paths] == ["B.heartbeats"]


def test_old_or_missing_heartbeats_are_stale_with_a_reason() -> None:
    newest = {"A.heartbeats": NOW - 9000, "B.heartbeats": None}
    paths = {p.topic: p for p in heartbeat_paths(POLICY, "C", newest, now_ms=NOW,
                                                  stale_after_ms=5000)}
    assert paths["A.heartbeats"].stale and "9000 ms old" in paths["A.heartbeats"].reason
    assert paths["B.heartbeats"].stale and "no heartbeat" in paths["B.heartbeats"].reason


# --- canary topic naming ------------------------------------------------------------------------


@pytest.mark.parametrize("policy", [DefaultReplicationPolicy(),
                                    IdentityReplicationPolicy(source_cluster_alias="a")])
def test_canary_is_renamed_and_mirrored_whatever_topics_says(policy: object) -> None:
    assert isinstance(policy, DefaultReplicationPolicy)
    remote = policy.format_remote_topic("a", policy.canary_topic())
    assert remote == "a.mirrorline-canary" and policy.is_canary_topic(remote)
    assert should_replicate_topic("mirrorline-canary", policy=policy,
                                  topic_filter=TopicFilter(("orders",)), target_alias="b",
                                  heartbeats_replication_enabled=False, canary_enabled=True)


def test_a_flow_without_canary_applies_its_topic_filter_to_the_canary_topic() -> None:
    policy = DefaultReplicationPolicy()

    def selected(topics: tuple[str, ...]) -> bool:
        return should_replicate_topic("mirrorline-canary", policy=policy,
                                      topic_filter=TopicFilter(topics), target_alias="b",
                                      heartbeats_replication_enabled=True,
                                      canary_enabled=False)

    assert not selected(("orders",))
    assert selected((".*",))  # a filter that takes everything takes it like any topic


# --- canary accounting ------------------------------------------------------------------------


def canary(seq: int, sent: int, partition: int = 0, session: int = 7) -> CanaryRecord:
    return CanaryRecord(session, partition, seq, sent)


def test_canary_record_round_trip_and_bad_bytes() -> None:
    record = canary(5, 1234, partition=3)
    assert CanaryRecord.decode(record.encode()) == record
    with pytest.raises(WireFormatError):
        CanaryRecord.decode(b"\x00\x01")
    with pytest.raises(WireFormatError):
        CanaryRecord.decode(b"\x00\x09" + record.encode()[2:])


def test_percentiles_nearest_rank() -> None:
    values = list(range(1, 101))
    assert (percentile(values, 50), percentile(values, 99), percentile([], 50)) == (50, 99,
                                                                                  None)


def test_canary_latency_gap_and_repeat() -> None:
    flow = FlowCanary(slo_ms=100, window_ms=10_000)
    for seq in range(1, 6):
        flow.sent(canary(seq, 1000 + seq))
    assert flow.arrived(canary(1, 1001), 1021) is None
    assert flow.arrived(canary(2, 1002), 1032) is None
    gap = flow.arrived(canary(5, 1005), 1045)
    assert gap is not None and "2 canaries" in gap
    repeat = flow.arrived(canary(2, 1002), 1050)
    assert repeat is not None and "repeated" in repeat
    status = flow.status(1060)
    assert (status.lost, status.duplicated, status.samples) == (2, 1, 3)
    assert (status.p50_ms, status.max_ms) == (30, 40)
    assert status.health is Health.DEGRADED and "lost" in status.reason
    flow.sent(canary(1, 2000, partition=1))
    flow.arrived(canary(1, 2000, partition=1), 2100)
    assert flow.partition_latencies(2200) == {0: (30, 40, 40.0, 3), 1: (100, 100, 100.0, 1)}


def test_canary_ok_then_violated_when_nothing_arrives() -> None:
    flow = FlowCanary(slo_ms=100, window_ms=10_000)
    assert flow.status(0).health is Health.UNKNOWN
    flow.sent(canary(1, 1000))
    flow.arrived(canary(1, 1000), 1010)
    assert flow.status(1020).health is Health.OK
    flow.sent(canary(2, 1100))
    assert flow.status(1150).health is Health.OK  # in flight, within the SLO
    late = flow.status(1250)
    assert late.health is Health.VIOLATED and "has not arrived" in late.reason


def reader_reads(flow: FlowCanary, state: dict[str, object], records: list[CanaryRecord],
                 at: int) -> None:
    """What the service's reader does with a batch (its partition opens at the first)."""
    opened = flow.open(0, at)
    for record in records:
        fold_arrival(state, record, at, window_ms=flow.window_ms, since_ms=opened)
        flow.seen(record)


def test_a_fresh_start_raises_no_alarm_while_the_mirror_starts() -> None:
    """A fresh start: canaries are sent every second from 1 s; the replicator finds the
    new canary topic only at its next topic refresh and copies the 29 waiting at 30 s.
    Nothing is overdue while the mirror could still be starting (refresh 30 s + SLO), the
    backlog gives no latency samples, and the first canary after it gives OK."""
    state = new_partition_state(0)
    flow = FlowCanary(slo_ms=5000, window_ms=60_000, states=lambda: {0: state},
                      started_ms=0, startup_ms=35_000)
    seen: set[Health] = set()
    for seq in range(1, 30):
        flow.sent(canary(seq, seq * 1000))
        seen.add(flow.status(seq * 1000 + 999).health)
    assert seen == {Health.UNKNOWN}
    assert "starting" in flow.status(29_999).reason
    reader_reads(flow, state, [canary(seq, seq * 1000) for seq in range(1, 30)], 30_000)
    assert flow.status(30_000).health is Health.UNKNOWN
    flow.sent(canary(30, 30_000))
    assert flow.status(30_100).health is Health.UNKNOWN
    reader_reads(flow, state, [canary(30, 30_000)], 30_200)
    status = flow.status(30_300)
    assert (status.health, status.samples, status.p99_ms) == (Health.OK, 1, 200)
    assert flow.status(90_000).health is Health.OK  # no overdue backlog left behind


def test_a_mirror_that_never_starts_violates_once_it_had_its_time() -> None:
    flow = FlowCanary(slo_ms=5000, window_ms=60_000, started_ms=0, startup_ms=35_000)
    for seq in range(1, 37):
        flow.sent(canary(seq, seq * 1000))
    assert flow.status(35_000).health is Health.UNKNOWN
    late = flow.status(35_001)
    assert late.health is Health.VIOLATED and "has not arrived" in late.reason
    assert "35000 ms a starting mirror is given" in late.reason


def test_canary_slow_median_violates_and_slow_tail_degrades() -> None:
    flow = FlowCanary(slo_ms=100, window_ms=10_000)
    for seq in range(1, 101):
        flow.sent(canary(seq, seq * 10))
        flow.arrived(canary(seq, seq * 10), seq * 10 + (500 if seq > 98 else 5))
    assert flow.status(2000).health is Health.DEGRADED
    slow = FlowCanary(slo_ms=100, window_ms=10_000)
    for seq in range(1, 11):
        slow.sent(canary(seq, seq))
        slow.arrived(canary(seq, seq), seq + 200)
    assert slow.status(300).health is Health.VIOLATED


def test_new_session_is_neither_gap_nor_repeat() -> None:
    flow = FlowCanary(slo_ms=100, window_ms=10_000)
    flow.arrived(canary(9, 10, session=1), 20)
    assert flow.arrived(canary(1, 30, session=2), 40) is None
    assert flow.status(50).lost == 0 and flow.status(50).duplicated == 0


def test_canary_state_resumes_from_json_without_false_gaps_or_lost_repeats() -> None:
    """The per-partition state as the faust table stores it (JSON): after a "restart"
    (a round trip through JSON and a new reader start time), counts are kept, the old
    session continues without a gap, a canary seen before is still a repeat, and what was
    sent before the restart gives no latency sample (that would be the downtime)."""
    state = new_partition_state(0)
    assert fold_arrival(state, canary(1, 100), 110, window_ms=10_000) is None
    assert fold_arrival(state, canary(2, 200), 210, window_ms=10_000) is None
    assert "repeated" in str(fold_arrival(state, canary(2, 200), 215, window_ms=10_000))
    state = json.loads(json.dumps(state))
    restarted = 5_000
    assert fold_arrival(state, canary(3, 300), 5_100, window_ms=10_000,
                        since_ms=restarted) is None
    assert "repeated" in str(fold_arrival(state, canary(1, 100), 5_100, window_ms=10_000,
                                          since_ms=restarted))
    assert (state["lost"], state["dup"]) == (0, 2)
    assert [latency for _at, latency in state["samples"]] == [10, 10]  # none after restart
    flow = FlowCanary(slo_ms=100, window_ms=10_000, states=lambda: {0: state})
    assert (flow.lost_total, flow.duplicated_total) == (0, 2)


def test_canary_of_an_unknown_session_sent_before_start_is_ignored() -> None:
    state = new_partition_state(0)
    assert fold_arrival(state, canary(7, 100, session=1), 9_000, window_ms=10_000,
                        since_ms=5_000) is None
    assert state["seen"] == {} and state["samples"] == []
    fold_arrival(state, canary(9, 6_000, session=1), 6_010, window_ms=10_000, since_ms=5_000)
    assert state["lost"] == 0 and state["seen"] == {"1": 9}


def test_canary_samples_leave_the_window() -> None:
    state = new_partition_state(0)
    for seq in range(1, 4):
        fold_arrival(state, canary(seq, seq * 1000), seq * 1000 + 5, window_ms=1500)
    assert [at for at, _latency in state["samples"]] == [2005, 3005]


def test_unreachable_is_never_ok() -> None:
    flow = FlowCanary(slo_ms=100, window_ms=10_000)
    flow.sent(canary(1, 1000))
    flow.arrived(canary(1, 1000), 1010)
    flow.unreachable = "target cluster 'b' unreachable: timeout"
    status = flow.status(1020)
    assert status.health is Health.UNKNOWN and "unreachable" in status.reason


# --- audit checksum ---------------------------------------------------------------------------

RECORDS = [
    (b"k1", b"v1", [("h", b"x")], 1000),
    (None, b"v2", [], 1001),
    (b"k3", None, [("a", b"1"), ("a", b"2")], 1002),
    (b"", b"", [("e", None)], 1003),
]


def digests(records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]],
                                int]]) -> list[int]:
    return [audit.record_digest(*r) for r in records]


def test_checksum_is_order_independent() -> None:
    expected = audit.checksum(digests(RECORDS))
    for order in itertools.permutations(RECORDS):
        assert audit.checksum(digests(list(order))) == expected


@pytest.mark.parametrize("change", [
    lambda r: (r[0] + b"!", r[1], r[2], r[3]),
    lambda r: (r[0], r[1] + b"!", r[2], r[3]),
    lambda r: (r[0], r[1], [("h", b"y")], r[3]),
    lambda r: (r[0], r[1], [("H", b"x")], r[3]),
    lambda r: (r[0], r[1], [("h", b"x"), ("h", b"x")], r[3]),
    lambda r: (r[0], r[1], [], r[3]),
    lambda r: (r[0], r[1], r[2], r[3] + 1),
    lambda r: (None, r[1], r[2], r[3]),
    lambda r: (r[0], None, r[2], r[3]),
], ids=["key", "value", "header-value", "header-name", "header-added", "header-removed",
        "timestamp", "key-null", "value-null"])
def test_checksum_sees_any_changed_part(change: object) -> None:
    assert callable(change)
    changed = [change(RECORDS[0]), *RECORDS[1:]]
    assert audit.checksum(digests(changed)) != audit.checksum(digests(RECORDS))


def test_every_byte_of_key_and_value_counts() -> None:
    base = audit.record_digest(b"abcdef", b"123456", [("h", b"zz")], 5)
    for i in range(6):
        key = bytearray(b"abcdef")
        key[i] ^= 1
        value = bytearray(b"123456")
        value[i] ^= 1
        assert audit.record_digest(bytes(key), b"123456", [("h", b"zz")], 5) != base
        assert audit.record_digest(b"abcdef", bytes(value), [("h", b"zz")], 5) != base
    assert audit.record_digest(b"abc", b"def123456", [("h", b"zz")], 5) != base


# --- windows and verdicts ---------------------------------------------------------------------

W = 1000


def side(records: list[tuple[int, int]], caught: int, judged: int = 0) -> dict[str, object]:
    state = Side.new(0, judged)
    deltas: dict[str, list[int]] = {}
    for ts, digest in records:
        audit.accumulate(deltas, ts, digest, W)
    Side.fold(state, deltas, len(records), caught)
    return state


def test_windows_close_only_when_both_sides_are_complete() -> None:
    source = side([(100, 1), (1500, 2)], caught=2600)
    target = side([(100, 1)], caught=2000)
    assert audit.closable(source, target, window_ms=W, grace_ms=500) == [0]
    target["caught"] = 2500
    assert audit.closable(source, target, window_ms=W, grace_ms=500) == [0, 1000]


def test_verdicts() -> None:
    assert audit.judge((3, 9), (3, 9)).verdict is Verdict.OK
    corrupted = audit.judge((3, 9), (3, 8))
    assert corrupted.verdict is Verdict.CORRUPTED and corrupted.count == 0
    missing = audit.judge((5, 9), (3, 6))
    assert (missing.verdict, missing.count, str(missing)) == (Verdict.MISSING, 2, "MISSING 2")
    dup = audit.judge((3, 9), (4, 12))
    assert (dup.verdict, dup.count) == (Verdict.DUPLICATED, 1)
    assert audit.judge((0, 0), (2, 5), source_truncated=True).verdict is Verdict.UNVERIFIABLE


def test_close_judges_once_and_late_records_are_counted_not_rejudged() -> None:
    source = side([(100, 1), (200, 2)], caught=5000)
    target = side([(100, 1), (200, 2), (200, 2)], caught=5000)
    [start] = audit.closable(source, target, window_ms=W, grace_ms=0)
    verdict = audit.close(source, target, start, W)
    assert (verdict.verdict, verdict.count) == (Verdict.DUPLICATED, 1)
    assert audit.closable(source, target, window_ms=W, grace_ms=0) == []
    Side.fold(target, {"0": [1, 3]}, 4, 5100)
    assert target["late"] == 1 and audit.closable(source, target, window_ms=W,
                                                  grace_ms=0) == []


def test_truncated_source_window_is_unverifiable() -> None:
    source = side([(2500, 7)], caught=5000)
    source["truncated"] = 2500
    target = side([(100, 1), (2500, 7)], caught=5000)
    verdicts = {s: audit.close(source, target, s, W)
                for s in audit.closable(source, target, window_ms=W, grace_ms=0)}
    assert verdicts[0].verdict is Verdict.UNVERIFIABLE
    assert verdicts[2000].verdict is Verdict.OK


def fold(state: dict[str, object], records: list[tuple[int, int]], caught: int) -> None:
    """Records read by one side after what it read so far (its `top` included)."""
    deltas: dict[str, list[int]] = {}
    for ts, digest in records:
        audit.accumulate(deltas, ts, digest, W)
    position = int(str(state["next"])) + len(records)
    Side.fold(state, deltas, position, caught, top=max((ts for ts, _ in records), default=-1))


def settled(source: dict[str, object], target: dict[str, object], now: int,
            missing_after_ms: int = 60_000) -> dict[int, str]:
    return {start: str(v) for start, v in audit.settle(
        source, target, now, window_ms=W, grace_ms=500, missing_after_ms=missing_after_ms)}


def test_a_paused_mirror_is_never_called_missing_and_its_records_are_late() -> None:
    """The mirror is paused: the source holds five records of window 0, the target none,
    and both readers are caught up well past the window's end and grace. Nothing is
    judged while the records could still come; when they do, the window is LATE 5 -- never
    MISSING. Late source-side records of a held window are counted in it too."""
    source, target = Side.new(0, 0), Side.new(0, 0)
    fold(source, [(100 + i, i) for i in range(5)], caught=1000)
    fold(target, [], caught=1000)
    for now in (2000, 10_000, 59_000):
        fold(source, [], caught=now)
        fold(target, [], caught=now)
        assert settled(source, target, now) == {}
    assert source["held"] == target["held"] == {"0": [2000, 0, 0]}
    fold(target, [(100 + i, i) for i in range(5)], caught=59_500)
    assert settled(source, target, 59_500) == {0: "LATE 5"}
    assert source["windows"] == target["windows"] == {} and source["held"] == {}
    assert target["late"] == 0  # held, not judged: they counted in the window


def test_a_skipped_record_is_missing_as_soon_as_the_target_moved_past_it() -> None:
    """A record of window 0 never reached the target, which already holds a record of a
    window more than the grace after window 0's end: the mirror copied past it."""
    source, target = Side.new(0, 0), Side.new(0, 0)
    fold(source, [(100, 1), (200, 2), (3000, 3)], caught=4000)
    fold(target, [(100, 1), (3000, 3)], caught=4000)
    assert settled(source, target, 4000) == {0: "MISSING 1"}
    assert source["held"] == {} and "0" not in source["windows"]


def test_a_lost_tail_is_missing_after_the_wait_and_late_if_it_comes_after_all() -> None:
    """The last record of an idle partition is not on the target, and nothing later is:
    MISSING once `missing_after_ms` passed. Should the record still come, the window is
    given again as LATE (the same key replaces the MISSING verdict)."""
    source, target = Side.new(0, 0), Side.new(0, 0)
    fold(source, [(100, 1), (200, 2)], caught=2000)
    fold(target, [(100, 1)], caught=2000)
    assert settled(source, target, 2000, missing_after_ms=5000) == {}
    assert settled(source, target, 6999, missing_after_ms=5000) == {}
    assert settled(source, target, 7000, missing_after_ms=5000) == {0: "MISSING 1"}
    assert settled(source, target, 9000, missing_after_ms=5000) == {}  # said once
    fold(target, [(200, 2)], caught=9500)
    assert settled(source, target, 9500, missing_after_ms=5000) == {0: "LATE 1"}


def test_a_mirror_stopped_for_good_holds_no_more_than_max_held_windows() -> None:
    source, target = Side.new(0, 0), Side.new(0, 0)
    windows = audit.MAX_HELD + 3
    fold(source, [(w * W + 1, w) for w in range(windows)], caught=windows * W + 500)
    fold(target, [], caught=windows * W + 500)
    given = settled(source, target, windows * W + 500)
    assert given == {w * W: "MISSING 1" for w in range(3)}
    assert len(source["held"]) == len(target["held"]) == audit.MAX_HELD


def test_a_held_window_still_finds_duplicates_and_alterations() -> None:
    for arriving, verdict in (([(200, 2), (200, 2)], "DUPLICATED 1"),
                              ([(200, 9)], "CORRUPTED")):
        source, target = Side.new(0, 0), Side.new(0, 0)
        fold(source, [(100, 1), (200, 2)], caught=2000)
        fold(target, [(100, 1)], caught=2000)
        assert settled(source, target, 2000) == {}
        fold(target, arriving, caught=3000)
        assert settled(source, target, 3000) == {0: verdict}


# --- trace links from record headers ------------------------------------------------------


def test_trace_contexts_from_traceparent_headers() -> None:
    from mirrorline.telemetry.links import trace_contexts

    one = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    two = b"00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-00"
    found = trace_contexts([[("traceparent", one)], [], [("x", b"y"), ("traceparent", two)],
                            [("traceparent", one)], [("traceparent", b"garbage")],
                            [("traceparent", None)]])
    assert [(c.trace_id, c.span_id) for c in found] == [
        (0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331),
        (0x0AF7651916CD43DD8448EB211C80319C, 0x00F067AA0BA902B7)]
    assert len(trace_contexts([[("traceparent", one)], [("traceparent", two)]], limit=1)) == 1


# --- the service's pure views ----------------------------------------------------------------


def test_verdict_store_dedups_by_key_and_skips_foreign_records() -> None:
    from dataclasses import dataclass

    from mirrorline.heartbeat.verdicts import VerdictStore, parse_verdict

    good = {"flow": "a->b", "topic": "t", "partition": 0, "window_start_ms": 1000,
            "window_end_ms": 2000, "verdict": "MISSING", "count": 2, "source_count": 5,
            "target_count": 3, "reason": "", "judged_ms": 3000}

    @dataclass
    class Rec:
        key: bytes | None
        value: bytes | None
        partition: int = 0
        offset: int = 0

    import json
    store = VerdictStore()
    store.load("audit", [Rec(b"k1", json.dumps(good).encode()),
                         Rec(b"k1", json.dumps(good).encode(), offset=1),
                         Rec(b"k2", b"not json", offset=2), Rec(None, b"{}", offset=3)])
    store.add("k1", good)
    assert len(store.query("a->b")) == 1
    by_verdict, missing, duplicated = store.totals("a->b")
    assert (by_verdict["MISSING"], missing, duplicated) == (1, 2, 0)
    with pytest.raises(ValueError):
        parse_verdict(b"k", b'{"flow": "a->b"}')


def test_topology_view_of_an_unreachable_cluster_is_stale_with_the_reason() -> None:
    from mirrorline.heartbeat.topology import TopologyWatcher

    watcher = TopologyWatcher("C", {}, POLICY, stale_after_ms=5000)
    watcher._newest = {"B.A.heartbeats": NOW - 10}
    watcher.error = None
    assert not watcher.view(NOW).paths[0].stale
    watcher.error = "KafkaConnectionError('down')"
    view = watcher.view(NOW)
    assert not view.reachable and view.paths[0].stale
    assert "unreachable" in view.paths[0].reason


def test_faust_gets_the_target_clusters_security() -> None:
    import ssl

    import faust

    from mirrorline.heartbeat.faust_plumbing import faust_credentials

    context = ssl.create_default_context()
    assert faust_credentials({}) is None
    assert isinstance(faust_credentials({"security_protocol": "SSL", "ssl_context": context}),
                      faust.SSLCredentials)
    sasl = faust_credentials({"security_protocol": "SASL_SSL", "ssl_context": context,
                              "sasl_mechanism": "SCRAM-SHA-512",
                              "sasl_plain_username": "u", "sasl_plain_password": "p"})
    assert isinstance(sasl, faust.SASLCredentials)
    assert (sasl.username, sasl.password, sasl.ssl_context) == ("u", "p", context)


def test_the_target_audit_reads_the_remote_topics_named_with_the_naming_alias() -> None:
    """With `source.cluster.alias` set, the replicator writes `east.orders`; the target side
    of the audit (and the canary reader) must read that topic, not `a.orders`, or every
    window reads as MISSING. (`_remote` is the one name mapping the reader uses; its app
    is not needed to name topics.)"""
    from typing import Any, cast

    from mirrorline.core.config import parse_config
    from mirrorline.heartbeat.audit_reader import AuditReader, FlowTopics

    settings = parse_config("clusters = a, b\na.bootstrap.servers = x:1\n"
                            "b.bootstrap.servers = y:1\na->b.enabled = true\n"
                            "source.cluster.alias = east\n")
    flow = settings.flows["a->b"]
    reader = AuditReader(flow, "target", cast(Any, None), FlowTopics(), {})
    assert reader._remote("orders") == "east.orders" == flow.remote_topic("orders")
    assert flow.remote_topic(flow.canary_topic) == f"east.{flow.canary_topic}"
