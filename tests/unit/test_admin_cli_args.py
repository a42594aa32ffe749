"""`mirrorline admin` arguments: parsing, validation and the requests they build.

Pure, like tests/unit/test_admin_cli.py: arguments in, requests out.
"""

from __future__ import annotations

import argparse

import pytest
from admin_cli_text import parse

from mirrorline.cli import main
from mirrorline.cli.admin_args import (
    DEFAULT_SERVER,
    POLICY_CLASSES,
    SERVER_ENV,
    build_create_request,
    build_update_request,
    parse_flow_name,
    parse_property,
    policy_class,
    resolve_server,
)
from mirrorline.v1 import admin_pb2, flows_pb2

DEFAULT_POLICY = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
IDENTITY_POLICY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"


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
