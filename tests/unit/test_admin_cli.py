"""`mirrorline admin`: rendering, argument parsing, request building and the leader redirect.

Tests here are pure (messages in, text out; arguments in, requests out), except one that
needs two controllers pointing at each other. The CLI against a real controller is tested
in tests/integration/test_admin_cli_live.py.
"""

from __future__ import annotations

import argparse
import json
import socket
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, cast

import grpc
import pytest

from mirrorline.cli import build_parser, main
from mirrorline.cli.admin_args import (
    DEFAULT_SERVER,
    POLICY_CLASSES,
    SERVER_ENV,
    RequestError,
    build_create_request,
    build_execute_failback_request,
    build_execute_failover_request,
    build_failover_to_time_request,
    build_plan_failback_request,
    build_plan_failover_request,
    build_translate_request,
    build_update_request,
    call_deadline,
    parse_flow_name,
    parse_property,
    parse_time,
    policy_class,
    resolve_server,
)
from mirrorline.cli.admin_calls import leader_redirect
from mirrorline.cli.admin_format import (
    flow_state_name,
    format_age,
    format_bytes_rate,
    format_flow,
    format_flows,
    format_import,
    format_status,
    format_workers,
    partition_state_name,
    render_table,
    to_dict,
    to_json,
)
from mirrorline.cli.admin_format_failover import (
    format_failback_plan,
    format_failback_result,
    format_failover_plan,
    format_failover_result,
    format_translate,
    format_translations,
)
from mirrorline.cli.admin_status import CLEAR_SCREEN, watch_frame
from mirrorline.v1 import admin_pb2, admin_pb2_grpc, failover_pb2, flows_pb2

DEFAULT_POLICY = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
IDENTITY_POLICY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["admin", *argv])


def columns(line: str) -> list[str]:
    """Cells of a rendered table line (cells hold no double blanks in these tests)."""
    return [cell.strip() for cell in line.split("  ") if cell.strip()]


def flow(name: str, **kwargs: Any) -> admin_pb2.Flow:
    source, _, target = name.partition("->")
    properties = kwargs.pop("properties", {})
    return admin_pb2.Flow(name=name, spec=flows_pb2.FlowSpec(
        source=source, target=target, properties=properties), **kwargs)


# --------------------------------------------------------------------------- tables


def test_render_table_pads_columns_and_aligns_numbers_right() -> None:
    text = render_table(("NAME", "N"), [("a", "1"), ("longer", "100")], right=(1,))
    assert text.splitlines() == [
        "NAME      N",
        "a         1",
        "longer  100",
    ]


def test_render_table_leaves_no_trailing_blanks() -> None:
    text = render_table(("A", "B"), [("xxxxx", "")])
    assert all(line == line.rstrip() for line in text.splitlines())


def test_state_names_drop_the_prefix_and_show_unknown_values_as_numbers() -> None:
    assert flow_state_name(flows_pb2.FLOW_STATE_RUNNING) == "running"
    assert partition_state_name(flows_pb2.PARTITION_STATE_UNASSIGNED) == "unassigned"
    assert flow_state_name(42) == "42"


def test_flows_table_lists_flows_sorted_by_name() -> None:
    text = format_flows([
        flow("b->a", state=flows_pb2.FLOW_STATE_PAUSED, paused=True, version=9,
             properties={"topics": "orders.*"}),
        flow("a->b", state=flows_pb2.FLOW_STATE_ERROR, partitions=12, version=7,
             error="source cluster unreachable",
             properties={"replication.policy.class": IDENTITY_POLICY}),
    ])
    header, first, second = text.splitlines()
    assert columns(header) == ["FLOW", "STATE", "PAUSED", "PARTITIONS", "TOPICS", "POLICY",
                               "VERSION", "ERROR"]
    assert columns(first) == ["a->b", "error", "no", "12", "-", IDENTITY_POLICY, "7",
                              "source cluster unreachable"]
    assert columns(second) == ["b->a", "paused", "yes", "0", "orders.*", "-", "9", "-"]


def test_flows_table_when_there_are_none() -> None:
    assert format_flows([]) == "no flows"


def test_flow_detail_shows_every_property_sorted() -> None:
    text = format_flow(flow("a->b", state=flows_pb2.FLOW_STATE_RUNNING, partitions=3,
                            version=5, properties={"topics.exclude": "tmp.*", "topics": ".*"}))
    lines = text.splitlines()
    assert columns(lines[0]) == ["flow", "a->b"]
    assert columns(lines[1]) == ["source", "a"]
    assert columns(lines[2]) == ["target", "b"]
    assert columns(lines[3]) == ["state", "running"]
    assert columns(lines[5]) == ["partitions", "3"]
    assert lines[-3:] == ["properties:", "  topics = .*", "  topics.exclude = tmp.*"]


def test_flow_detail_without_properties() -> None:
    assert format_flow(flow("a->b")).splitlines()[-2:] == ["properties:", "  -"]


def status_report() -> admin_pb2.StatusReport:
    return admin_pb2.StatusReport(
        generated_at_ms=1_700_000_000_000, controller_id="ctl-1", epoch=4,
        flows=[admin_pb2.FlowSummary(
            flow="a->b", state=flows_pb2.FLOW_STATE_RUNNING, partitions=2, lag_records=150,
            max_lag_ms=1234.4, records_per_second=55.55, bytes_per_second=2048)],
        partitions=[
            flows_pb2.PartitionStatus(
                flow="a->b", source_topic="orders", target_topic="a.orders", partition=1,
                source_end_offset=-1, next_offset=40, lag_records=-1, lag_ms=-1,
                state=flows_pb2.PARTITION_STATE_STARTING, worker_id="w-2"),
            flows_pb2.PartitionStatus(
                flow="a->b", source_topic="orders", target_topic="a.orders", partition=0,
                source_end_offset=1000, next_offset=850, lag_records=150, lag_ms=1234.4,
                state=flows_pb2.PARTITION_STATE_ERROR, worker_id="w-1",
                error="record too large\nfor the target"),
            flows_pb2.PartitionStatus(
                flow="a->b", source_topic="audit", partition=0, source_end_offset=0,
                next_offset=0, lag_records=0, lag_ms=0,
                state=flows_pb2.PARTITION_STATE_UNASSIGNED),
        ])


def test_status_shows_a_summary_line_per_flow() -> None:
    header, summary, _partitions = format_status(status_report()).split("\n\n")
    assert "controller ctl-1 (epoch 4)" in header
    head, line = summary.splitlines()
    assert columns(head) == ["FLOW", "STATE", "PARTITIONS", "LAG RECORDS", "MAX LAG MS",
                             "RECORDS/S", "BYTES/S", "ERROR"]
    assert columns(line) == ["a->b", "running", "2", "150", "1234", "55.5", "2.0 KiB", "-"]


def test_status_shows_partitions_sorted_with_unknown_values_as_question_marks() -> None:
    lines = format_status(status_report()).split("\n\n")[2].splitlines()
    assert columns(lines[0]) == ["FLOW", "TOPIC", "PARTITION", "WORKER", "END OFFSET",
                                 "NEXT OFFSET", "LAG RECORDS", "LAG MS", "STATE", "ERROR"]
    assert columns(lines[1]) == ["a->b", "audit", "0", "-", "0", "0", "0", "0",
                                 "unassigned", "-"]
    assert columns(lines[2]) == ["a->b", "orders", "0", "w-1", "1000", "850", "150", "1234",
                                 "error", "record too large for the target"]
    assert columns(lines[3]) == ["a->b", "orders", "1", "w-2", "?", "40", "?", "?",
                                 "starting", "-"]


def test_status_without_flows() -> None:
    assert format_status(admin_pb2.StatusReport()) == "no flows"


def test_workers_table() -> None:
    response = admin_pb2.ListWorkersResponse(workers=[
        admin_pb2.Worker(worker_id="w-2", address="10.0.0.2:7110", alive=False,
                         last_heartbeat_ms=100_000 - 75_000, bytes_per_second=0,
                         records_per_second=0),
        admin_pb2.Worker(worker_id="w-1", address="10.0.0.1:7110", alive=True,
                         last_heartbeat_ms=100_000 - 1_500,
                         bytes_per_second=3 * 1024 * 1024, records_per_second=1200.26,
                         partitions=[admin_pb2.AssignedPartition(flow="a->b", topic="t",
                                                                 partition=p)
                                     for p in range(3)]),
        admin_pb2.Worker(worker_id="w-3"),
    ])
    lines = format_workers(response, now_ms=100_000).splitlines()
    assert columns(lines[0]) == ["WORKER", "ADDRESS", "ALIVE", "HEARTBEAT AGE", "BYTES/S",
                                 "RECORDS/S", "PARTITIONS"]
    assert columns(lines[1]) == ["w-1", "10.0.0.1:7110", "yes", "1.5s", "3.0 MiB", "1200.3",
                                 "3"]
    assert columns(lines[2]) == ["w-2", "10.0.0.2:7110", "no", "1m15s", "0 B", "0.0", "0"]
    assert columns(lines[3]) == ["w-3", "-", "no", "-", "0 B", "0.0", "0"]


def test_workers_table_when_there_are_none() -> None:
    assert format_workers(admin_pb2.ListWorkersResponse(), now_ms=0) == "no workers"


@pytest.mark.parametrize(("age_ms", "text"), [
    (0, "0.0s"), (-500, "0.0s"), (400, "0.4s"), (59_949, "59.9s"), (60_000, "1m00s"),
    (3_599_000, "59m59s"), (3_600_000, "1h00m"), (7_500_000, "2h05m"),
])
def test_format_age(age_ms: int, text: str) -> None:
    assert format_age(age_ms) == text


@pytest.mark.parametrize(("rate", "text"), [
    (0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (10 * 1024**2, "10.0 MiB"),
    (2 * 1024**3, "2.0 GiB"), (-1, "?"),
])
def test_format_bytes_rate(rate: float, text: str) -> None:
    assert format_bytes_rate(rate) == text


def test_import_result_lists_what_happened_to_each_flow() -> None:
    response = admin_pb2.ImportFlowsResponse(created=["a->b"], updated=["b->a"],
                                             unchanged=["a->c"], warnings=["x"])
    assert format_import(response).splitlines() == ["created a->b", "updated b->a",
                                                    "unchanged a->c"]
    assert format_import(admin_pb2.ImportFlowsResponse()) == "no flows in the file"


# --------------------------------------------------------------------------- json


def test_json_uses_proto_field_names_and_prints_every_field() -> None:
    document = json.loads(to_json(status_report()))
    assert document["controller_id"] == "ctl-1"
    assert document["generated_at_ms"] == "1700000000000"  # int64: a string in proto3 JSON
    assert document["flows"][0]["max_lag_ms"] == 1234.4
    assert document["flows"][0]["state"] == "FLOW_STATE_RUNNING"
    audit = document["partitions"][2]
    assert audit["partition"] == 0  # zeros are printed, not dropped
    assert audit["lag_records"] == "0"
    assert audit["worker_id"] == ""
    assert set(audit) == {f.name for f in flows_pb2.PartitionStatus.DESCRIPTOR.fields}


def test_json_of_workers_includes_their_partitions() -> None:
    response = admin_pb2.ListWorkersResponse(workers=[admin_pb2.Worker(
        worker_id="w-1", partitions=[admin_pb2.AssignedPartition(flow="a->b", topic="t")])])
    assert to_dict(response)["workers"] == [{
        "worker_id": "w-1", "address": "", "alive": False, "last_heartbeat_ms": "0",
        "lease_expires_ms": "0", "bytes_per_second": 0.0, "records_per_second": 0.0,
        "partitions": [{"flow": "a->b", "topic": "t", "partition": 0}],
        "kind": "", "ui_address": "", "problem": "",
    }]


def test_compact_json_is_one_line() -> None:
    text = to_json(status_report(), compact=True)
    assert "\n" not in text
    assert json.loads(text) == to_dict(status_report())


def test_watch_frames() -> None:
    report = status_report()
    line = watch_frame(report, output="json", tty=True, first=True)
    assert line.endswith("\n") and line.count("\n") == 1
    assert json.loads(line)["epoch"] == "4"
    table = format_status(report) + "\n"
    assert watch_frame(report, output="table", tty=True, first=False) == CLEAR_SCREEN + table
    assert watch_frame(report, output="table", tty=False, first=True) == table
    assert watch_frame(report, output="table", tty=False, first=False) == "\n" + table


# --------------------------------------------------------------------------- arguments


def test_parse_property_splits_at_the_first_equals_sign() -> None:
    assert parse_property("topics=a.*,b.*") == ("topics", "a.*,b.*")
    assert parse_property("x.regex=a=b==c") == ("x.regex", "a=b==c")
    assert parse_property(" offset.lag.max =100") == ("offset.lag.max", "100")
    assert parse_property("topics=") == ("topics", "")


@pytest.mark.parametrize("bad", ["topics", "=value", " =x", ""])
def test_bad_set_is_an_argparse_error(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_property(bad)
    with pytest.raises(SystemExit) as exit_info:
        parse("flows", "create", "a->b", "--set", bad)
    assert exit_info.value.code == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err


def test_set_is_repeatable() -> None:
    args = parse("flows", "create", "a->b", "--set", "a=1", "--set", "b=x=y")
    assert args.set == [("a", "1"), ("b", "x=y")]


@pytest.mark.parametrize(("text", "name"), [
    ("a->b", "a->b"), (" primary -> backup ", "primary->backup"), ("us-east->eu", "us-east->eu"),
])
def test_flow_names(text: str, name: str) -> None:
    assert parse_flow_name(text) == name


@pytest.mark.parametrize("bad", ["a", "a->", "->b", "a->b->c", "a->a", "a-b"])
def test_bad_flow_names(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_flow_name(bad)
    with pytest.raises(SystemExit) as exit_info:
        parse("flows", "get", bad)
    assert exit_info.value.code == 2


def test_policy_short_names_become_mm2_class_names() -> None:
    assert policy_class("default") == DEFAULT_POLICY
    assert policy_class("Identity") == IDENTITY_POLICY
    assert policy_class("com.example.MyPolicy") == "com.example.MyPolicy"
    assert set(POLICY_CLASSES) == {"default", "identity"}


def test_create_request_from_the_positional_flow_and_named_options() -> None:
    args = parse("flows", "create", "primary->backup", "--topics", "orders.*,audit",
                 "--topics-exclude", ".*tmp", "--policy", "identity",
                 "--set", "refresh.topics.interval.seconds=30", "--set", "x=a=b")
    request = build_create_request(args)
    assert request == admin_pb2.CreateFlowRequest(spec=flows_pb2.FlowSpec(
        source="primary", target="backup", properties={
            "topics": "orders.*,audit", "topics.exclude": ".*tmp",
            "replication.policy.class": IDENTITY_POLICY,
            "refresh.topics.interval.seconds": "30", "x": "a=b"}))


def test_create_request_from_source_and_target_options() -> None:
    request = build_create_request(parse("flows", "create", "--source", "a", "--target", "b"))
    assert request.spec.source == "a"
    assert request.spec.target == "b"
    assert dict(request.spec.properties) == {}


@pytest.mark.parametrize("argv", [
    ["a->b", "--source", "a"],
    ["--source", "a"],
    ["--target", "b"],
    [],
    ["--source", "a", "--target", "a"],
    ["a->b", "--topics", "x", "--set", "topics=y"],
    ["a->b", "--set", "k=1", "--set", "k=2"],
    ["a->b", "--policy", "default", "--set", f"replication.policy.class={IDENTITY_POLICY}"],
])
def test_create_argument_errors_exit_2(argv: list[str],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["admin", "--server", "127.0.0.1:1", "flows", "create", *argv])
    assert exit_info.value.code == 2
    assert "mirrorline admin flows create: error:" in capsys.readouterr().err


def test_the_same_value_twice_is_not_a_conflict() -> None:
    args = parse("flows", "create", "a->b", "--topics", "x", "--set", "topics=x",
                 "--policy", "default", "--set", f"replication.policy.class={DEFAULT_POLICY}")
    assert dict(build_create_request(args).spec.properties) == {
        "topics": "x", "replication.policy.class": DEFAULT_POLICY}


def test_update_request_sets_and_unsets() -> None:
    args = parse("flows", "update", "a->b", "--topics", "t.*", "--set", "offset.lag.max=10",
                 "--unset", "topics.exclude", "--unset", "sync.group.offsets.enabled",
                 "--unset", "topics.exclude")
    assert build_update_request(args) == admin_pb2.UpdateFlowRequest(
        name="a->b", set={"topics": "t.*", "offset.lag.max": "10"},
        unset=["topics.exclude", "sync.group.offsets.enabled"])


def test_update_request_with_only_a_policy() -> None:
    request = build_update_request(parse("flows", "update", "a->b", "--policy", "default"))
    assert dict(request.set) == {"replication.policy.class": DEFAULT_POLICY}
    assert list(request.unset) == []


@pytest.mark.parametrize("argv", [
    ["a->b"],
    ["a->b", "--topics", "x", "--unset", "topics"],
    ["a->b", "--unset", "k=v"],
])
def test_update_argument_errors_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["admin", "--server", "127.0.0.1:1", "flows", "update", *argv])
    assert exit_info.value.code == 2


def test_global_options_defaults_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    args = parse("flows", "list")
    assert (args.server, args.output, args.timeout) == (None, "table", 10.0)
    assert resolve_server(args.server, {}) == DEFAULT_SERVER == "127.0.0.1:7100"
    assert resolve_server(None, {SERVER_ENV: "ctl:7100"}) == "ctl:7100"
    assert resolve_server(None, {SERVER_ENV: "  "}) == DEFAULT_SERVER
    assert resolve_server("explicit:1", {SERVER_ENV: "ctl:7100"}) == "explicit:1"


def test_global_options_are_accepted_after_the_subcommand_too() -> None:
    args = parse("--output", "json", "--server", "x:1", "flows", "list", "--timeout", "2.5")
    assert (args.server, args.output, args.timeout) == ("x:1", "json", 2.5)
    args = parse("--output", "json", "status", "--output", "table")
    assert args.output == "table"


@pytest.mark.parametrize("argv", [
    ["--timeout", "0", "workers"],
    ["--timeout", "soon", "workers"],
    ["--output", "yaml", "workers"],
    ["status", "--watch", "--interval", "0.1"],
    ["flows", "delete"],
    ["flows", "frobnicate"],
])
def test_bad_arguments_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["admin", *argv])
    assert exit_info.value.code == 2


def test_a_command_group_alone_prints_help_and_returns_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["admin"]) == 2
    assert main(["admin", "flows"]) == 2
    assert "usage: mirrorline admin flows" in capsys.readouterr().err


def test_interval_needs_watch() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["admin", "--server", "127.0.0.1:1", "status", "--interval", "1"])
    assert exit_info.value.code == 2


# --------------------------------------------------------------------------- failover output

TRANSLATION_HEADER = ["TOPIC", "PARTITION", "TARGET TOPIC", "SOURCE OFFSET", "TARGET OFFSET",
                      "EXACT", "MAX DUPLICATES", "BASIS"]


def translations() -> list[failover_pb2.OffsetTranslation]:
    return [
        failover_pb2.OffsetTranslation(
            topic="orders", partition=1, target_topic="primary.orders", source_offset=-1,
            target_offset=-1, exact=False, max_duplicates=-1, basis="no committed offset"),
        failover_pb2.OffsetTranslation(
            topic="orders", partition=0, target_topic="primary.orders", source_offset=1200,
            target_offset=1180, exact=False, max_duplicates=12, basis="offset sync"),
        failover_pb2.OffsetTranslation(
            topic="audit", partition=0, target_topic="primary.audit", source_offset=7,
            target_offset=7, exact=True, max_duplicates=0, basis="offset map"),
    ]


def test_translate_table_sorted_with_unknown_offsets_as_question_marks() -> None:
    text = format_translate(failover_pb2.TranslateOffsetsResponse(
        flow="primary->backup", group="billing", partitions=translations()))
    header, table = text.split("\n\n")
    assert header == "flow primary->backup, group billing"
    lines = table.splitlines()
    assert columns(lines[0]) == TRANSLATION_HEADER
    assert columns(lines[1]) == ["audit", "0", "primary.audit", "7", "7", "yes", "0",
                                 "offset map"]
    assert columns(lines[2]) == ["orders", "0", "primary.orders", "1200", "1180", "no", "12",
                                 "offset sync"]
    assert columns(lines[3]) == ["orders", "1", "primary.orders", "?", "?", "no", "?",
                                 "no committed offset"]
    assert len(lines) == 4


def test_translate_without_partitions() -> None:
    assert format_translations([]) == "no partitions"
    assert format_translate(failover_pb2.TranslateOffsetsResponse(
        flow="a->b", group="g")).endswith("\n\nno partitions")


def failover_plan(*, safe: bool) -> failover_pb2.FailoverPlan:
    return failover_pb2.FailoverPlan(
        flow="primary->backup", safe=safe, replication_lag_records=150 if not safe else 0,
        replication_lag_ms=1234.4 if not safe else 0.0, source_reachable=True,
        groups=[
            failover_pb2.GroupReadiness(
                group="billing", safe=safe,
                reasons=[] if safe else ["150 records not mirrored yet",
                                         "2 members are active on the target"],
                expected_duplicates=12, records_not_mirrored=150 if not safe else 0,
                checkpoint_age_ms=4_200, active_members_on_target=0 if safe else 2,
                partitions=translations()),
            failover_pb2.GroupReadiness(group="audit", safe=True, checkpoint_age_ms=-1,
                                        expected_duplicates=-1),
        ])


def test_failover_plan_that_is_not_safe_says_so_first() -> None:
    text = format_failover_plan(failover_plan(safe=False))
    blocks = text.split("\n\n")
    assert blocks[0] == "NOT SAFE to fail over flow primary->backup (groups: billing)"
    assert blocks[1] == ("flow primary->backup  safe: NO  replication lag: 150 records, "
                         "max 1234 ms  source reachable: yes")
    billing = blocks[2].splitlines()
    assert billing[0] == "group billing: NOT SAFE"
    assert [columns(line) for line in billing[1:5]] == [
        ["expected duplicates:", "12"], ["records not mirrored:", "150"],
        ["checkpoint age:", "4.2s"], ["active members on target:", "2"]]
    assert billing[5:] == ["  reasons:", "    - 150 records not mirrored yet",
                           "    - 2 members are active on the target"]
    partitions = blocks[3].splitlines()
    assert columns(partitions[0]) == TRANSLATION_HEADER
    assert columns(partitions[3]) == ["orders", "1", "primary.orders", "?", "?", "no", "?",
                                      "no committed offset"]
    audit = blocks[4].splitlines()
    assert audit[0] == "group audit: SAFE"
    assert columns(audit[1]) == ["expected duplicates:", "?"]
    assert columns(audit[3]) == ["checkpoint age:", "none"]
    assert "reasons" not in blocks[4]
    assert blocks[5] == "no partitions"


def test_failover_plan_that_is_safe() -> None:
    text = format_failover_plan(failover_plan(safe=True))
    assert "NOT SAFE" not in text
    assert text.startswith("flow primary->backup  safe: YES  replication lag: 0 records, "
                           "max 0 ms  source reachable: yes\n\ngroup billing: SAFE\n")


def test_failover_plan_with_an_unreachable_source_and_unknown_lag() -> None:
    text = format_failover_plan(failover_pb2.FailoverPlan(
        flow="a->b", safe=False, replication_lag_records=-1, replication_lag_ms=-1))
    assert text.splitlines() == [
        "NOT SAFE to fail over flow a->b", "",
        "flow a->b  safe: NO  replication lag: ? records, max ? ms  source reachable: no", "",
        "no groups"]


def test_a_group_not_safe_without_reasons_says_so() -> None:
    text = format_failover_plan(failover_pb2.FailoverPlan(
        flow="a->b", groups=[failover_pb2.GroupReadiness(group="g")]))
    assert "group g: NOT SAFE\n" in text
    assert "  reasons: none given" in text


def test_failover_result_lists_committed_offsets_sorted() -> None:
    result = failover_pb2.FailoverResult(flow="primary->backup", warnings=["not exact"],
                                         committed=[
        failover_pb2.CommittedOffset(group="web", target_topic="primary.orders", partition=0,
                                     offset=-1, exact=False, max_duplicates=-1,
                                     basis="no checkpoint"),
        failover_pb2.CommittedOffset(group="billing", target_topic="primary.orders",
                                     partition=1, offset=1180, exact=False, max_duplicates=12,
                                     basis="offset sync"),
        failover_pb2.CommittedOffset(group="billing", target_topic="primary.orders",
                                     partition=0, offset=40, exact=True, basis="offset map"),
    ])
    header, table = format_failover_result(result).split("\n\n")
    assert header == "flow primary->backup: offsets committed on the target"
    lines = table.splitlines()
    assert columns(lines[0]) == ["GROUP", "TARGET TOPIC", "PARTITION", "OFFSET", "EXACT",
                                 "MAX DUPLICATES", "BASIS"]
    assert columns(lines[1]) == ["billing", "primary.orders", "0", "40", "yes", "0",
                                 "offset map"]
    assert columns(lines[2]) == ["billing", "primary.orders", "1", "1180", "no", "12",
                                 "offset sync"]
    assert columns(lines[3]) == ["web", "primary.orders", "0", "?", "no", "?",
                                 "no checkpoint"]
    assert "not exact" not in table  # warnings go to stderr


def test_failover_result_of_to_time_names_the_time_in_utc() -> None:
    result = failover_pb2.FailoverResult(flow="a->b", committed=[
        failover_pb2.CommittedOffset(group="g", target_topic="t", offset=5, exact=True)])
    header = format_failover_result(result, at_ms=1_795_233_780_000).split("\n\n")[0]
    assert header == "flow a->b: offsets committed on the target for 2026-11-21T04:03:00Z"
    assert format_failover_result(failover_pb2.FailoverResult(flow="a->b"),
                                  at_ms=1_795_233_780_250) == (
        "flow a->b: no offsets committed for 2026-11-21T04:03:00.250Z")


def failback_plan(**kwargs: Any) -> failover_pb2.FailbackPlan:
    return failover_pb2.FailbackPlan(flow="primary->backup", reverse_flow="backup->primary",
                                     **kwargs)


def test_failback_plan_report() -> None:
    text = format_failback_plan(failback_plan(
        reverse_exists=False,
        diverged=[
            failover_pb2.DivergedPartition(topic="orders", partition=1, old_primary_end=-1,
                                           mirrored_next=500, diverged_records=-1),
            failover_pb2.DivergedPartition(topic="orders", partition=0, old_primary_end=1300,
                                           mirrored_next=1200, diverged_records=100),
        ],
        groups_on_old_primary=["billing", "web"], notes=["the old primary was written to"],
        confirm="scrape-primary"))
    blocks = text.split("\n\n")
    assert [columns(line) for line in blocks[0].splitlines()] == [
        ["flow:", "primary->backup"], ["reverse flow:", "backup->primary (does not exist yet)"]]
    diverged = blocks[1].splitlines()
    assert diverged[0].startswith("diverged partitions")
    assert columns(diverged[1]) == ["TOPIC", "PARTITION", "OLD PRIMARY END", "MIRRORED NEXT",
                                    "DIVERGED RECORDS"]
    assert columns(diverged[2]) == ["orders", "0", "1300", "1200", "100"]
    assert columns(diverged[3]) == ["orders", "1", "?", "500", "?"]
    assert blocks[2].splitlines() == ["groups with offsets on the old primary:", "  - billing",
                                      "  - web"]
    assert blocks[3].splitlines() == ["notes:", "  - the old primary was written to"]
    # The flow name is quoted: unquoted, the shell would take `>` for a redirection.
    assert blocks[4] == ("to scrape, run: mirrorline admin failback execute "
                         "'primary->backup' --scrape --confirm scrape-primary")
    assert len(blocks) == 5


def test_failback_plan_quotes_a_confirmation_text_with_blanks() -> None:
    text = format_failback_plan(failback_plan(confirm="scrape primary's data"))
    assert text.splitlines()[-1] == (
        "to scrape, run: mirrorline admin failback execute 'primary->backup' --scrape "
        """--confirm 'scrape primary'"'"'s data'""")


def test_failback_plan_with_nothing_diverged_and_no_scrape_offered() -> None:
    text = format_failback_plan(failback_plan(reverse_exists=True))
    assert "reverse flow:  backup->primary (exists)" in text
    assert "diverged partitions: none" in text
    assert "groups with offsets on the old primary: none" in text
    assert "notes" not in text
    assert "to scrape" not in text


def test_failback_result() -> None:
    text = format_failback_result(failover_pb2.FailbackResult(
        reverse_flow="backup->primary", created=True, scraped_topics=["orders", "audit"],
        deleted_groups=["billing"], warnings=["x"]))
    assert [columns(line) for line in text.splitlines()] == [
        ["reverse flow:", "backup->primary (created)"],
        ["scraped topics:", "orders, audit"], ["deleted groups:", "billing"]]
    text = format_failback_result(failover_pb2.FailbackResult(reverse_flow="backup->primary"))
    assert [columns(line) for line in text.splitlines()] == [
        ["reverse flow:", "backup->primary (already existed, not created)"],
        ["scraped topics:", "none"], ["deleted groups:", "none"]]


def test_json_of_a_failover_plan() -> None:
    document = to_dict(failover_plan(safe=False))
    assert document["safe"] is False
    assert document["replication_lag_records"] == "150"
    audit = cast(list[dict[str, object]], document["groups"])[1]
    assert audit["checkpoint_age_ms"] == "-1"  # raw values, not "?"
    assert audit["reasons"] == []


# --------------------------------------------------------------------------- failover requests


def test_translate_request() -> None:
    args = parse("offsets", "translate", " primary -> backup ", "--group", "billing")
    assert build_translate_request(args) == failover_pb2.TranslateOffsetsRequest(
        flow="primary->backup", group="billing")


def test_plan_failover_request_takes_repeated_groups_once_each_in_order() -> None:
    args = parse("failover", "plan", "a->b", "--group", "web", "--group", "billing",
                 "--group", "web")
    assert build_plan_failover_request(args) == failover_pb2.PlanFailoverRequest(
        flow="a->b", groups=["web", "billing"])


@pytest.mark.parametrize(("mode", "value"), [
    ("drain", failover_pb2.FAILOVER_MODE_DRAIN), ("now", failover_pb2.FAILOVER_MODE_NOW),
])
def test_execute_failover_request_modes(mode: str,
                                        value: failover_pb2.FailoverMode.ValueType) -> None:
    args = parse("failover", "execute", "a->b", "--group", "g1", "--group", "g2",
                 "--mode", mode)
    assert build_execute_failover_request(args) == failover_pb2.ExecuteFailoverRequest(
        flow="a->b", groups=["g1", "g2"], mode=value, drain_timeout_ms=0)


def test_execute_failover_request_with_a_drain_timeout() -> None:
    args = parse("failover", "execute", "a->b", "--group", "g", "--mode", "drain",
                 "--drain-timeout", "90.5")
    request = build_execute_failover_request(args)
    assert request.drain_timeout_ms == 90_500
    assert request.mode == failover_pb2.FAILOVER_MODE_DRAIN


@pytest.mark.parametrize(("argv", "deadline"), [
    (["--mode", "drain"], 90.0),                                   # the server's 60 s + 30
    (["--mode", "drain", "--drain-timeout", "5"], 35.0),
    (["--mode", "drain", "--drain-timeout", "600"], 630.0),
    (["--mode", "drain", "--drain-timeout", "5", "--timeout", "120"], 120.0),
    (["--mode", "now"], 10.0),
    (["--mode", "now", "--timeout", "3"], 3.0),
])
def test_the_deadline_of_execute_covers_the_drain(argv: list[str], deadline: float) -> None:
    assert call_deadline(parse("failover", "execute", "a->b", "--group", "g", *argv)) \
        == deadline


def test_other_commands_use_the_timeout_as_deadline() -> None:
    assert call_deadline(parse("failover", "plan", "a->b", "--group", "g")) == 10.0
    assert call_deadline(parse("--timeout", "4", "failback", "plan", "a->b")) == 4.0
    assert call_deadline(parse("flows", "list")) == 10.0


@pytest.mark.parametrize(("text", "ms"), [
    ("1795233780000", 1_795_233_780_000),
    (" 1795233780000 ", 1_795_233_780_000),
    ("0", 0),
    ("2026-11-21T04:03:00Z", 1_795_233_780_000),
    ("2026-11-21 04:03:00+02:00", 1_795_233_780_000 - 2 * 3_600_000),
    ("2026-11-21T04:03:00.250-01:30", 1_795_233_780_250 + 90 * 60_000),
    ("2026-11-21T04:03Z", 1_795_233_780_000),
    ("1970-01-01T00:00:00Z", 0),
])
def test_parse_time(text: str, ms: int) -> None:
    assert parse_time(text) == ms


@pytest.mark.parametrize(("text", "message"), [
    ("2026-11-21T04:03:00", "has no time zone"),
    ("2026-11-21 04:03:00", "has no time zone"),
    ("2026-11-21", "has no time zone"),
    ("1795233780", "looks like epoch seconds"),
    ("1795233780000000", "past the year 5000"),
    ("1969-12-31T23:59:59Z", "before 1970"),
    ("-5", "is not a time"),
    ("yesterday", "is not a time"),
    ("", "is not a time"),
    ("2026-13-01T00:00:00Z", "is not a time"),
])
def test_parse_time_rejections(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        parse_time(text)


def test_a_time_without_zone_is_an_argparse_error_asking_for_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["admin", "--server", "127.0.0.1:1", "failover", "to-time", "a->b",
              "--group", "g", "--time", "2026-11-21T04:03:00"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "mirrorline admin failover to-time: error: argument --time:" in err
    assert "has no time zone: add one, e.g. 2026-11-21T04:03:00Z for UTC" in err


@pytest.mark.parametrize("time", ["1795233780000", "2026-11-21T04:03:00Z",
                                  "2026-11-21T06:03:00+02:00"])
def test_failover_to_time_request(time: str) -> None:
    args = parse("failover", "to-time", "a->b", "--group", "g", "--group", "h",
                 "--time", time)
    assert build_failover_to_time_request(args) == failover_pb2.FailoverToTimeRequest(
        flow="a->b", groups=["g", "h"], timestamp_ms=1_795_233_780_000)


def test_failback_requests() -> None:
    assert build_plan_failback_request(parse("failback", "plan", "primary->backup")) == \
        failover_pb2.PlanFailbackRequest(flow="primary->backup")
    assert build_execute_failback_request(parse("failback", "execute", "a->b")) == \
        failover_pb2.ExecuteFailbackRequest(flow="a->b")
    args = parse("failback", "execute", "a->b", "--scrape", "--confirm", "scrape a",
                 "--topic", "orders", "--topic", "audit", "--topic", "orders")
    assert build_execute_failback_request(args) == failover_pb2.ExecuteFailbackRequest(
        flow="a->b", scrape=True, confirm="scrape a", topics=["orders", "audit"])


@pytest.mark.parametrize(("argv", "message"), [
    (["--scrape"], "--scrape needs --confirm TEXT"),
    (["--scrape", "--topic", "t"], "--scrape needs --confirm TEXT"),
    (["--confirm", "x"], "--confirm only applies with --scrape"),
    (["--topic", "t"], "--topic only applies with --scrape"),
])
def test_failback_execute_argument_errors_exit_2(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RequestError, match=message):
        build_execute_failback_request(parse("failback", "execute", "a->b", *argv))
    with pytest.raises(SystemExit) as exit_info:
        main(["admin", "--server", "127.0.0.1:1", "failback", "execute", "a->b", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "mirrorline admin failback execute: error:" in err
    assert message in err


@pytest.mark.parametrize(("argv", "message"), [
    (["failover", "execute", "a->b", "--group", "g"],
     "the following arguments are required: --mode"),
    (["failover", "execute", "a->b", "--group", "g", "--mode", "fast"],
     "argument --mode: invalid choice: 'fast'"),
    (["failover", "execute", "a->b", "--mode", "now"],
     "the following arguments are required: --group"),
    (["failover", "execute", "a->b", "--group", "g", "--mode", "now", "--drain-timeout", "5"],
     "--drain-timeout only applies with --mode drain"),
    (["failover", "execute", "a->b", "--group", "g", "--mode", "drain",
      "--drain-timeout", "3000000"], "--drain-timeout is at most 2147483 seconds"),
    (["failover", "execute", "a->b", "--group", "g", "--mode", "drain",
      "--drain-timeout", "0"], "must be a positive number of seconds"),
    (["failover", "plan", "a->b"], "the following arguments are required: --group"),
    (["failover", "plan", "a->b", "--group", " "], "the group is empty"),
    (["failover", "to-time", "a->b", "--group", "g"],
     "the following arguments are required: --time"),
    (["offsets", "translate", "a->b"], "the following arguments are required: --group"),
    (["offsets", "translate", "a", "--group", "g"], "is not a flow name"),
    (["failback", "plan"], "the following arguments are required: FLOW"),
    (["failback", "execute", "a->b", "--scrape", "--confirm", ""],
     "the confirmation text is empty"),
])
def test_failover_argument_errors_exit_2(argv: list[str], message: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["admin", "--server", "127.0.0.1:1", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_new_command_groups_alone_print_help_and_return_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["admin", "offsets"]) == 2
    assert main(["admin", "failover"]) == 2
    assert main(["admin", "failback"]) == 2
    err = capsys.readouterr().err
    assert "usage: mirrorline admin failover" in err
    assert "to-time" in err and "execute" in err


# --------------------------------------------------------------------------- redirect


UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize(("code", "metadata", "current", "expected"), [
    (UNAVAILABLE, [("leader-address", "10.0.0.7:7100")], None, "10.0.0.7:7100"),
    (UNAVAILABLE, [("x", "y"), ("Leader-Address", " ctl-2:7100 ")], None, "ctl-2:7100"),
    (UNAVAILABLE, [("leader-address", b"ctl-2:7100")], None, "ctl-2:7100"),
    (UNAVAILABLE, [("leader-address", "ctl-2:7100")], "ctl-2:7100", None),
    (UNAVAILABLE, [("leader-address", "")], None, None),
    (UNAVAILABLE, [], None, None),
    (UNAVAILABLE, None, None, None),
    (grpc.StatusCode.FAILED_PRECONDITION, [("leader-address", "ctl-2:7100")], None, None),
    (grpc.StatusCode.INVALID_ARGUMENT, [("leader-address", "ctl-2:7100")], None, None),
    (None, [("leader-address", "ctl-2:7100")], None, None),
])
def test_leader_redirect(code: grpc.StatusCode | None,
                         metadata: list[tuple[str, str | bytes]] | None,
                         current: str | None, expected: str | None) -> None:
    assert leader_redirect(code, metadata, current=current) == expected


# --------------------------------------------------------------------------- fake server


@dataclass
class FakeAdmin:
    """Answers like a controller (the few methods used here); `leader` set makes it a
    follower pointing there."""

    leader: str | None = None
    requests: list[Any] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:
        if not name[:1].isupper():
            raise AttributeError(name)

        def unimplemented(request: Any, context: grpc.ServicerContext) -> None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, name)
        return unimplemented  # the other Admin methods

    def _check(self, context: grpc.ServicerContext) -> None:
        if self.leader is not None:
            context.set_trailing_metadata((("leader-address", self.leader),))
            context.abort(grpc.StatusCode.UNAVAILABLE, "not the leader")

    def ListFlows(self, request: Any, context: Any) -> admin_pb2.ListFlowsResponse:
        self.requests.append(request)
        self._check(context)
        return admin_pb2.ListFlowsResponse(flows=[flow("a->b", partitions=3)])


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[grpc.Server] = []

    def start(servicer: FakeAdmin) -> str:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        admin_pb2_grpc.add_AdminServicer_to_server(
            cast(admin_pb2_grpc.AdminServicer, servicer), server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for server in servers:
        server.stop(grace=None)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_a_redirect_is_followed_once_only(
        serve: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Two controllers each naming the other as leader happen only in a leadership race,
    which a real deployment cannot stage on demand: stand-ins play both (the only fake
    server in the suite; the CLI against real controllers is tested in
    tests/integration/test_admin_cli_live.py)."""
    second = FakeAdmin(leader="127.0.0.1:1")
    first = FakeAdmin(leader=serve(second))
    assert main(["admin", "--server", serve(first), "flows", "list"]) == 1
    assert capsys.readouterr().err == "mirrorline: UNAVAILABLE: not the leader\n"
    assert (len(first.requests), len(second.requests)) == (1, 1)


def test_a_plaintext_redirect_to_another_host_is_not_followed(
        serve: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """A server that redirects to an address of its choosing is an attacker's tool (it
    would receive the next request); a stand-in plays that server."""
    rogue = FakeAdmin(leader="203.0.113.9:7100")
    assert main(["admin", "--server", serve(rogue), "flows", "list"]) == 1
    err = capsys.readouterr().err
    assert "not following a plaintext redirect" in err and "203.0.113.9:7100" in err
    assert len(rogue.requests) == 1
