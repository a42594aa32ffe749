"""`mirrorline admin`: rendering tables and JSON, and the leader redirect.

Tests here are pure (messages in, text out), except one that needs two controllers
pointing at each other. Arguments are in test_admin_cli_args.py; the offsets, failover
and failback commands in test_admin_cli_failover.py; the CLI against a real controller
in tests/integration/test_admin_cli_live.py.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, cast

import grpc
import pytest
from admin_cli_text import columns

from mirrorline.cli import main
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
from mirrorline.cli.admin_status import CLEAR_SCREEN, watch_frame
from mirrorline.v1 import admin_pb2, admin_pb2_grpc, flows_pb2

IDENTITY_POLICY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"


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
                state=flows_pb2.PARTITION_STATE_STARTING, worker_id="w-2",
                copy_path="records", copy_path_reason=(
                    "source batches average 1.0 records, 95 B: re-batched (batches go as "
                    "they are from 32 records or 8192 B on average)")),
            flows_pb2.PartitionStatus(
                flow="a->b", source_topic="orders", target_topic="a.orders", partition=0,
                source_end_offset=1000, next_offset=850, lag_records=150, lag_ms=1234.4,
                state=flows_pb2.PARTITION_STATE_ERROR, worker_id="w-1",
                error="record too large\nfor the target", copy_path="batches",
                copy_path_reason="source batches average 300.0 records"),
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
                                 "NEXT OFFSET", "LAG RECORDS", "LAG MS", "STATE", "PATH",
                                 "ERROR"]
    assert columns(lines[1]) == ["a->b", "audit", "0", "-", "0", "0", "0", "0",
                                 "unassigned", "-", "-"]
    assert columns(lines[2]) == ["a->b", "orders", "0", "w-1", "1000", "850", "150", "1234",
                                 "error", "batches", "record too large for the target"]
    assert columns(lines[3]) == ["a->b", "orders", "1", "w-2", "?", "40", "?", "?",
                                 "starting",
                                 "records: source batches average 1.0 records, 95 B", "-"]


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
    #: Calls answered first as a controller still taking office does.
    taking_office: int = 0

    def __getattr__(self, name: str) -> Any:
        if not name[:1].isupper():
            raise AttributeError(name)

        def unimplemented(request: Any, context: grpc.ServicerContext) -> None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, name)
        return unimplemented  # the other Admin methods

    def _check(self, context: grpc.ServicerContext) -> None:
        if self.taking_office:
            self.taking_office -= 1
            context.set_trailing_metadata((("retry-after-ms", "100"),))
            context.abort(grpc.StatusCode.UNAVAILABLE, "just elected and taking office")
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
    which a real deployment cannot stage on demand: stand-ins play both (fake
    servers only here; the CLI against real controllers is tested in
    tests/integration/test_admin_cli_live.py)."""
    second = FakeAdmin(leader="127.0.0.1:1")
    first = FakeAdmin(leader=serve(second))
    assert main(["admin", "--server", serve(first), "flows", "list"]) == 1
    assert capsys.readouterr().err == "mirrorline: UNAVAILABLE: not the leader\n"
    assert (len(first.requests), len(second.requests)) == (1, 1)


def test_a_controller_taking_office_is_asked_again_within_the_deadline(
        serve: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """A command run right after a deployment started meets a controller elected a moment
    ago, still seeding its log; a real deployment cannot hold that moment on demand, so a
    stand-in answers as it does (UNAVAILABLE with retry-after-ms) three times."""
    office = FakeAdmin(taking_office=3)
    assert main(["admin", "--server", serve(office), "flows", "list"]) == 0
    assert "a->b" in capsys.readouterr().out
    assert len(office.requests) == 4
    # Past the call's deadline it gives up with the controller's words.
    slow = FakeAdmin(taking_office=1_000)
    assert main(["admin", "--server", serve(slow), "--timeout", "1", "flows", "list"]) == 1
    assert "taking office" in capsys.readouterr().err
    assert len(slow.requests) > 1  # asked again, then gave up


def test_a_plaintext_redirect_to_another_host_is_not_followed(
        serve: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """A server that redirects to an address of its choosing is an attacker's tool (it
    would receive the next request); a stand-in plays that server."""
    rogue = FakeAdmin(leader="203.0.113.9:7100")
    assert main(["admin", "--server", serve(rogue), "flows", "list"]) == 1
    err = capsys.readouterr().err
    assert "not following a plaintext redirect" in err and "203.0.113.9:7100" in err
    assert len(rogue.requests) == 1
