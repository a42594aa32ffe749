"""`mirrorline admin ...`: a thin client of the controller's Admin API.

The API is `proto/mirrorline/v1/admin.proto` (offset translation, failover and failback:
`proto/mirrorline/v1/failover.proto`). This module is the command table: it registers the
commands, with the `flows`, `workers` and `history` handlers here and the others in one
module each:

* `mirrorline.cli.admin_calls` -- calling the controller (synchronous gRPC API), the
  redirect to the leader, error messages and exit statuses;
* `mirrorline.cli.admin_args` -- arguments in, requests out (pure);
* `mirrorline.cli.admin_format` and `admin_format_failover` -- responses in, tables out
  (pure), or with `--output json` one JSON document per response;
* `mirrorline.cli.admin_status` -- `status [--watch]`;
* `mirrorline.cli.admin_failover` -- `offsets translate`, `failover plan|execute|to-time`,
  `failback plan|execute`;
* `mirrorline.cli.admin_drift`, `admin_heartbeat`, `admin_security`, `partitions` --
  `drift`, `topology|canary|audit`, `token`, `partitions offload|reclaim`.

Warnings in an answer go to stderr as `mirrorline: warning: ...` (with `--output json` they
are in the document only).

The options `--server`, `--output` and `--timeout` are accepted after `admin` and after any
of its subcommands (`mirrorline admin flows list --output json`); the last one given wins.
`--timeout` is the deadline of each call, except `failover execute --mode drain`, which
waits for the drain: its deadline is the larger of `--timeout` and the drain timeout plus
30 seconds (`call_deadline`).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any, Final

import grpc

from mirrorline.cli import (
    admin_drift,
    admin_failover,
    admin_heartbeat,
    admin_security,
    admin_status,
    partitions,
)
from mirrorline.cli.admin_args import (
    DEFAULT_SERVER,
    SERVER_ENV,
    alias_arg,
    build_create_request,
    build_update_request,
    parse_flow_name,
    parse_property,
    positive_seconds,
    property_key,
    server_address,
)
from mirrorline.cli.admin_calls import (
    AdminError,
    built,
    connection_of,
    emit,
    fail,
    invoke,
    unary,
    usage_error,
)
from mirrorline.cli.admin_format import (
    format_deleted,
    format_flow,
    format_flows,
    format_import,
    format_workers,
    printable,
)
from mirrorline.cli.admin_history import format_history
from mirrorline.core.errors import ConfigError
from mirrorline.core.flowdefs import flow_level_text
from mirrorline.v1 import admin_pb2, admin_pb2_grpc, audit_pb2

__all__ = ["DEFAULT_TIMEOUT", "read_properties_file", "register"]

DEFAULT_TIMEOUT: Final = 10.0


# --------------------------------------------------------------------------- handlers


def _history(args: argparse.Namespace) -> int:
    return unary(args, lambda stub: stub.History,
                 audit_pb2.HistoryRequest(flow=args.flow or "", limit=args.limit),
                 format_history)


def _flows_list(args: argparse.Namespace) -> int:
    return unary(args, lambda stub: stub.ListFlows, admin_pb2.ListFlowsRequest(),
                 lambda response: format_flows(response.flows))


def _flow_call(
    method: Callable[[admin_pb2_grpc.AdminStub],
                     grpc.UnaryUnaryMultiCallable[admin_pb2.FlowRequest, admin_pb2.Flow]],
) -> Callable[[argparse.Namespace], int]:
    """get, pause and resume: a FlowRequest answered by the Flow."""
    def handler(args: argparse.Namespace) -> int:
        return unary(args, method, admin_pb2.FlowRequest(name=args.name), format_flow)
    return handler


def _flows_create(args: argparse.Namespace) -> int:
    return unary(args, lambda stub: stub.CreateFlow, built(args, build_create_request),
                 format_flow)


def _flows_update(args: argparse.Namespace) -> int:
    return unary(args, lambda stub: stub.UpdateFlow, built(args, build_update_request),
                 format_flow)


def _flows_delete(args: argparse.Namespace) -> int:
    return unary(args, lambda stub: stub.DeleteFlow, admin_pb2.FlowRequest(name=args.name),
                 format_deleted)


def read_properties_file(path: str) -> str:
    """The file's text, decoded as the config loader does (UTF-8, else ISO-8859-1)."""
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("iso-8859-1")


def _flows_import(args: argparse.Namespace) -> int:
    try:
        text = read_properties_file(args.file)
    except OSError as exc:
        return usage_error(args, f"cannot read {args.file}: {exc.strerror or exc}")
    try:
        # Only flow definitions travel: connections, client settings and secrets stay here.
        text, _left_out = flow_level_text(text, source=args.file)
    except ConfigError as exc:
        return usage_error(args, str(exc))
    request = admin_pb2.ImportFlowsRequest(properties=text, source_name=args.file)
    try:
        response = invoke(connection_of(args), lambda stub: stub.ImportFlows, request)
    except AdminError as error:
        return fail(error)
    except KeyboardInterrupt:
        return 130
    emit(args, response, lambda: format_import(response))
    if args.output != "json":
        for warning in response.warnings:
            print(printable(f"mirrorline: warning: {warning}"), file=sys.stderr)
    return 0


def _workers(args: argparse.Namespace) -> int:
    return unary(args, lambda stub: stub.ListWorkers, admin_pb2.ListWorkersRequest(),
                 lambda response: format_workers(response, now_ms=int(time.time() * 1000)))


# --------------------------------------------------------------------------- parser


def _help_for(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """A command group alone is a usage error: print its help, status 2."""
    def show_help(args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return 2
    return show_help


def _add_connection_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """--server, --output, --timeout: with their defaults on `admin`; without (SUPPRESS) on
    the subcommands, so that a value given after `admin` is not reset by a subcommand."""
    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument(
        "--server", type=server_address, default=default(None), metavar="HOST:PORT",
        help=f"controller address (default: ${SERVER_ENV}, else {DEFAULT_SERVER})")
    parser.add_argument(
        "--output", choices=("table", "json"), default=default("table"),
        help="table (default) or json: one JSON document per response")
    parser.add_argument(
        "--timeout", type=positive_seconds, default=default(DEFAULT_TIMEOUT),
        metavar="SECONDS", help=f"deadline of each call (default: {DEFAULT_TIMEOUT:g})")
    admin_security.add_options(parser, defaults=defaults)


def _add_property_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topics", metavar="REGEXES",
                        help="MM2 `topics`: comma-separated regexes of topics to copy")
    parser.add_argument("--topics-exclude", metavar="REGEXES",
                        help="MM2 `topics.exclude`: comma-separated regexes of topics to skip")
    parser.add_argument("--policy", metavar="default|identity|CLASS",
                        help="MM2 `replication.policy.class` (default and identity name "
                             "MM2's DefaultReplicationPolicy and IdentityReplicationPolicy)")
    parser.add_argument("--set", type=parse_property, action="append", metavar="KEY=VALUE",
                        help="set any flow-level MM2 property (repeatable)")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    admin = subparsers.add_parser(
        "admin", help="manage flows and inspect a running deployment (Admin API client)",
        description="Client of the controller's Admin API. A controller that is not the "
                    "leader redirects the call to the leader.")
    _add_connection_options(admin, defaults=True)
    admin.set_defaults(handler=_help_for(admin), command_parser=admin)
    admin_sub = admin.add_subparsers(dest="admin_command", metavar="COMMAND")

    common = argparse.ArgumentParser(add_help=False)
    _add_connection_options(common, defaults=False)

    def leaf(sub: Any, name: str, handler: Callable[[argparse.Namespace], int],
             help_text: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = sub.add_parser(name, parents=[common],
                                                         help=help_text)
        parser.set_defaults(handler=handler, command_parser=parser)
        return parser

    flows = admin_sub.add_parser("flows", parents=[common], help="list and change flows")
    flows.set_defaults(handler=_help_for(flows), command_parser=flows)
    flows_sub = flows.add_subparsers(dest="flows_command", metavar="ACTION")

    leaf(flows_sub, "list", _flows_list, "list the flows")

    get = leaf(flows_sub, "get", _flow_call(lambda stub: stub.GetFlow), "show one flow")
    get.add_argument("name", type=parse_flow_name, metavar="NAME", help="SOURCE->TARGET")

    create = leaf(flows_sub, "create", _flows_create, "create a flow")
    create.add_argument("flow", nargs="?", type=parse_flow_name, metavar="SOURCE->TARGET",
                        help="the flow (or give --source and --target)")
    create.add_argument("--source", type=alias_arg, metavar="ALIAS", help="source cluster alias")
    create.add_argument("--target", type=alias_arg, metavar="ALIAS", help="target cluster alias")
    _add_property_options(create)

    update = leaf(flows_sub, "update", _flows_update, "change properties of a flow")
    update.add_argument("name", type=parse_flow_name, metavar="NAME", help="SOURCE->TARGET")
    _add_property_options(update)
    update.add_argument("--unset", type=property_key, action="append", metavar="KEY",
                        help="return a property to its default (repeatable)")

    for action, handler, text in (
            ("pause", _flow_call(lambda stub: stub.PauseFlow), "stop copying (positions are kept)"),
            ("resume", _flow_call(lambda stub: stub.ResumeFlow), "resume a paused flow"),
            ("delete", _flows_delete, "stop a flow and forget it (remote topics stay)")):
        parser = leaf(flows_sub, action, handler, text)
        parser.add_argument("name", type=parse_flow_name, metavar="NAME", help="SOURCE->TARGET")

    import_ = leaf(flows_sub, "import", _flows_import,
                   "create and update flows from an MM2 properties file")
    import_.add_argument("file", metavar="FILE", help="MM2 properties file (read locally)")

    admin_status.register(admin_sub, leaf)

    leaf(admin_sub, "workers", _workers, "replicator workers and their partitions")
    history = leaf(admin_sub, "history", _history,
                   "the audit trail: who changed what, newest last")
    history.add_argument("--flow", type=parse_flow_name, metavar="FLOW",
                         help="only calls about this flow")
    history.add_argument("--limit", type=int, default=100, metavar="N",
                         help="newest N entries (default 100)")
    admin_security.register_token(admin_sub)

    admin_heartbeat.register(admin_sub, leaf)

    def group(name: str, help_text: str) -> Any:
        parser = admin_sub.add_parser(name, parents=[common], help=help_text)
        parser.set_defaults(handler=_help_for(parser), command_parser=parser)
        return parser.add_subparsers(dest=f"{name}_command", metavar="ACTION")

    partitions.register(group("partitions", "where partitions run: the replicator workers "
                                            "or the Spark executor"), leaf, unary)

    admin_failover.register(group, leaf)

    admin_drift.register(admin_sub, common)

