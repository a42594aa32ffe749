"""`mirrorline admin ...`: a thin client of the controller's Admin API.

The API is `proto/mirrorline/v1/admin.proto` (offset translation, failover and failback:
`proto/mirrorline/v1/failover.proto`). This module registers the commands, builds their
requests with `mirrorline.cli.admin_args`, calls the controller with the synchronous gRPC
API and prints the answer: a table
(`mirrorline.cli.admin_format`) or, with `--output json`, one JSON document per response.
Warnings in an answer go to stderr as `mirrorline: warning: ...` (with `--output json` they
are in the document only).

A controller that is not the leader answers UNAVAILABLE with the trailing metadata
`leader-address`; every call is then retried once against that address
(`leader_redirect` decides). Failures print `mirrorline: <CODE NAME>: <server message>`, or
`mirrorline: cannot reach the controller at HOST:PORT (...)`, and exit with status 1;
argument errors exit with argparse's status 2.

The options `--server`, `--output` and `--timeout` are accepted after `admin` and after any
of its subcommands (`mirrorline admin flows list --output json`); the last one given wins.
`--timeout` is the deadline of each call, except `failover execute --mode drain`, which
waits for the drain: its deadline is the larger of `--timeout` and the drain timeout plus
30 seconds (`call_deadline`).

Commands: `flows list|get|create|update|pause|resume|delete|import`, `status`, `workers`,
`offsets translate`, `failover plan|execute|to-time`, `failback plan|execute`, and
`drift [apply|history]` (`mirrorline.cli.admin_drift`).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar, cast

import grpc
from google.protobuf.message import Message

from mirrorline import grpcsecure
from mirrorline.cli import admin_security, partitions
from mirrorline.cli.admin_args import (
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_SERVER,
    DRAIN_DEADLINE_MARGIN,
    FAILOVER_MODES,
    SERVER_ENV,
    RequestError,
    alias_arg,
    build_create_request,
    build_execute_failback_request,
    build_execute_failover_request,
    build_failover_to_time_request,
    build_plan_failback_request,
    build_plan_failover_request,
    build_translate_request,
    build_update_request,
    call_deadline,
    non_blank,
    parse_flow_name,
    parse_property,
    parse_time,
    positive_seconds,
    property_key,
    resolve_server,
    server_address,
)
from mirrorline.cli.admin_format import (
    format_deleted,
    format_failback_plan,
    format_failback_result,
    format_failover_plan,
    format_failover_result,
    format_flow,
    format_flows,
    format_import,
    format_status,
    format_translate,
    format_workers,
    to_json,
)
from mirrorline.cli.admin_history import format_history
from mirrorline.core.errors import ConfigError
from mirrorline.core.flowdefs import flow_level_text
from mirrorline.grpcsecure import ClientCredentials
from mirrorline.v1 import admin_pb2, admin_pb2_grpc, audit_pb2

__all__ = [
    "LEADER_ADDRESS_KEY",
    "AdminError",
    "leader_redirect",
    "register",
    "watch_frame",
]

DEFAULT_TIMEOUT: Final = 10.0
LEADER_ADDRESS_KEY: Final = "leader-address"


#: ANSI: cursor home, clear the screen; `status --watch` redraws in place on a terminal.
CLEAR_SCREEN: Final = "\x1b[H\x1b[2J"

_Req = TypeVar("_Req", bound=Message)
_Resp = TypeVar("_Resp", bound=Message)


class AdminError(Exception):
    """A call that failed; the text is what follows `mirrorline: ` on stderr."""


# --------------------------------------------------------------------------- calls


def leader_redirect(code: grpc.StatusCode | None,
                    trailing_metadata: Iterable[tuple[str, str | bytes]] | None,
                    *, current: str | None = None) -> str | None:
    """The address to retry a failed call against, or None.

    Only UNAVAILABLE with a non-blank `leader-address` trailing metadata entry redirects
    (the key is compared case-insensitively); an address equal to `current`, the one just
    called, does not.
    """
    if code is not grpc.StatusCode.UNAVAILABLE or not trailing_metadata:
        return None
    for key, value in trailing_metadata:
        if key.lower() != LEADER_ADDRESS_KEY:
            continue
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        address = text.strip()
        if address and address != current:
            return address
        return None
    return None


def error_message(code: grpc.StatusCode, details: str | None) -> str:
    """`INVALID_ARGUMENT: topics: ...` (the code name alone when there are no details)."""
    return f"{code.name}: {details}" if details else code.name


def unreachable_message(address: str, details: str | None) -> str:
    return f"cannot reach the controller at {address} ({details or 'no answer'})"


def _reached(channel: grpc.Channel) -> bool:
    """Whether `channel` is connected: after an UNAVAILABLE or DEADLINE_EXCEEDED, tells a
    server that answered so from one that was never reached."""
    ready = grpc.channel_ready_future(channel)
    try:
        ready.result(timeout=0.2)
    except grpc.FutureTimeoutError:
        return False
    finally:
        ready.cancel()
    return True


def _failure(exc: grpc.RpcError, address: str, channel: grpc.Channel) -> AdminError:
    code, details = exc.code(), exc.details()
    transport = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    if code in transport and not _reached(channel):
        return AdminError(unreachable_message(address, details))
    return AdminError(error_message(code, details))


def _redirect_of(exc: grpc.RpcError, address: str) -> str | None:
    try:
        code, metadata = exc.code(), exc.trailing_metadata()
    except AttributeError:  # an RpcError that is not a call (no status to look at)
        return None
    # At run time each entry is a (key, value) named tuple (grpc's _Metadatum).
    pairs = [cast(tuple[str, str | bytes], tuple(cast(Iterable[Any], entry)))
             for entry in metadata or ()]
    return leader_redirect(code, pairs, current=address)


@dataclass(frozen=True)
class Connection:
    server: str
    timeout: float
    credentials: ClientCredentials = field(default_factory=ClientCredentials)


def _follow(connection: Connection, address: str, leader: str | None) -> str | None:
    """The leader to retry at, None to give up; AdminError when the redirect is refused."""
    if leader is None:
        return None
    if not admin_security.may_follow(leader, connection.credentials):
        raise AdminError(admin_security.refused_redirect(address, leader))
    return leader


def invoke(connection: Connection,
           method: Callable[[admin_pb2_grpc.AdminStub],
                            grpc.UnaryUnaryMultiCallable[_Req, _Resp]],
           request: _Req) -> _Resp:
    """One unary call with the deadline, retried once at the leader; AdminError on failure."""
    address = connection.server
    for attempt in range(2):
        with grpcsecure.blocking_channel(address, connection.credentials) as channel:
            try:
                return method(admin_pb2_grpc.AdminStub(channel))(
                    request, timeout=connection.timeout)
            except grpc.RpcError as exc:
                leader = _follow(connection, address,
                                 _redirect_of(exc, address) if attempt == 0 else None)
                if leader is None:
                    raise _failure(exc, address, channel) from None
                address = leader
    raise AssertionError("unreachable")  # pragma: no cover


# --------------------------------------------------------------------------- output


def watch_frame(report: admin_pb2.StatusReport, *, output: str, tty: bool,
                first: bool) -> str:
    """What `status --watch` writes for one report: a JSON line; a redrawn table on a
    terminal; successive tables separated by a blank line otherwise."""
    if output == "json":
        return to_json(report, compact=True) + "\n"
    table = format_status(report) + "\n"
    if tty:
        return CLEAR_SCREEN + table
    return table if first else "\n" + table


def _emit(args: argparse.Namespace, response: Message, render: Callable[[], str]) -> None:
    print(to_json(response) if args.output == "json" else render())


def _connection(args: argparse.Namespace) -> Connection:
    try:
        creds = admin_security.credentials(args)
    except ConfigError as exc:
        raise AdminError(f"credentials: {exc}") from None
    return Connection(resolve_server(args.server, os.environ), call_deadline(args), creds)


def _fail(error: AdminError) -> int:
    print(f"mirrorline: {error}", file=sys.stderr)
    return 1


def _unary(args: argparse.Namespace,
           method: Callable[[admin_pb2_grpc.AdminStub],
                            grpc.UnaryUnaryMultiCallable[_Req, _Resp]],
           request: _Req, render: Callable[[_Resp], str],
           warnings: Callable[[_Resp], Iterable[str]] | None = None,
           problem: Callable[[_Resp], str | None] | None = None) -> int:
    """Call, print the answer (and its `warnings` on stderr, unless the output is JSON);
    an answer in which `problem` finds one is printed too, but exits with status 1."""
    try:
        response = invoke(_connection(args), method, request)
    except AdminError as error:
        return _fail(error)
    except KeyboardInterrupt:
        return 130
    _emit(args, response, lambda: render(response))
    if warnings is not None and args.output != "json":
        for warning in warnings(response):
            print(f"mirrorline: warning: {warning}", file=sys.stderr)
    found = problem(response) if problem is not None else None
    if found is not None:
        print(f"mirrorline: {found}", file=sys.stderr)
        return 1
    return 0


def _usage_error(args: argparse.Namespace, message: str) -> int:
    parser: argparse.ArgumentParser = args.command_parser
    parser.error(message)  # exits with status 2


# --------------------------------------------------------------------------- handlers


def _history(args: argparse.Namespace) -> int:
    return _unary(args, lambda stub: stub.History,
                  audit_pb2.HistoryRequest(flow=args.flow or "", limit=args.limit),
                  format_history)


def _flows_list(args: argparse.Namespace) -> int:
    return _unary(args, lambda stub: stub.ListFlows, admin_pb2.ListFlowsRequest(),
                  lambda response: format_flows(response.flows))


def _flow_call(
    method: Callable[[admin_pb2_grpc.AdminStub],
                     grpc.UnaryUnaryMultiCallable[admin_pb2.FlowRequest, admin_pb2.Flow]],
) -> Callable[[argparse.Namespace], int]:
    """get, pause and resume: a FlowRequest answered by the Flow."""
    def handler(args: argparse.Namespace) -> int:
        return _unary(args, method, admin_pb2.FlowRequest(name=args.name), format_flow)
    return handler


def _flows_create(args: argparse.Namespace) -> int:
    try:
        request = build_create_request(args)
    except RequestError as exc:
        return _usage_error(args, str(exc))
    return _unary(args, lambda stub: stub.CreateFlow, request, format_flow)


def _flows_update(args: argparse.Namespace) -> int:
    try:
        request = build_update_request(args)
    except RequestError as exc:
        return _usage_error(args, str(exc))
    return _unary(args, lambda stub: stub.UpdateFlow, request, format_flow)


def _flows_delete(args: argparse.Namespace) -> int:
    return _unary(args, lambda stub: stub.DeleteFlow, admin_pb2.FlowRequest(name=args.name),
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
        return _usage_error(args, f"cannot read {args.file}: {exc.strerror or exc}")
    try:
        # Only flow definitions travel: connections, client settings and secrets stay here.
        text, _left_out = flow_level_text(text, source=args.file)
    except ConfigError as exc:
        return _usage_error(args, str(exc))
    request = admin_pb2.ImportFlowsRequest(properties=text, source_name=args.file)
    try:
        response = invoke(_connection(args), lambda stub: stub.ImportFlows, request)
    except AdminError as error:
        return _fail(error)
    except KeyboardInterrupt:
        return 130
    _emit(args, response, lambda: format_import(response))
    if args.output != "json":
        for warning in response.warnings:
            print(f"mirrorline: warning: {warning}", file=sys.stderr)
    return 0


def _workers(args: argparse.Namespace) -> int:
    return _unary(args, lambda stub: stub.ListWorkers, admin_pb2.ListWorkersRequest(),
                  lambda response: format_workers(response, now_ms=int(time.time() * 1000)))


def _built(args: argparse.Namespace, build: Callable[[argparse.Namespace], _Req]) -> _Req:
    """`build(args)`; a RequestError is a usage error (exit status 2)."""
    try:
        return build(args)
    except RequestError as exc:
        _usage_error(args, str(exc))
        raise AssertionError("unreachable") from None  # pragma: no cover


def _offsets_translate(args: argparse.Namespace) -> int:
    return _unary(args, lambda stub: stub.TranslateOffsets,
                  _built(args, build_translate_request), format_translate,
                  problem=lambda r: None if r.partitions else (
                      f"group {r.group!r} has no committed offsets on the topics flow "
                      f"{r.flow} mirrors (check the group name and that it has consumed "
                      "from a mirrored topic)"))


def _failover_plan(args: argparse.Namespace) -> int:
    """A report: status 0 whether the plan is safe or not."""
    return _unary(args, lambda stub: stub.PlanFailover,
                  _built(args, build_plan_failover_request), format_failover_plan)


def _failover_execute(args: argparse.Namespace) -> int:
    return _unary(args, lambda stub: stub.ExecuteFailover,
                  _built(args, build_execute_failover_request), format_failover_result,
                  warnings=lambda result: result.warnings)


def _failover_to_time(args: argparse.Namespace) -> int:
    return _unary(args, lambda stub: stub.FailoverToTime,
                  _built(args, build_failover_to_time_request),
                  lambda result: format_failover_result(result, at_ms=args.time),
                  warnings=lambda result: result.warnings)


def _failback_plan(args: argparse.Namespace) -> int:
    return _unary(args, lambda stub: stub.PlanFailback,
                  _built(args, build_plan_failback_request), format_failback_plan)


def _failback_execute(args: argparse.Namespace) -> int:
    return _unary(args, lambda stub: stub.ExecuteFailback,
                  _built(args, build_execute_failback_request), format_failback_result,
                  warnings=lambda result: result.warnings)


def _status(args: argparse.Namespace) -> int:
    if args.interval is not None and not args.watch:
        return _usage_error(args, "--interval only applies with --watch")
    if args.watch:
        try:
            return _watch(args)
        except AdminError as error:
            return _fail(error)
    return _unary(args, lambda stub: stub.GetStatus,
                  admin_pb2.GetStatusRequest(flow=args.flow or ""), format_status)


def _watch(args: argparse.Namespace) -> int:
    """Print every report of WatchStatus until Ctrl-C (status 0) or a failure (AdminError).

    The stream has no deadline, but the first report must come within `--timeout`; a
    redirect to the leader happens only before the first report.
    """
    connection = _connection(args)
    interval_ms = round(args.interval * 1000) if args.interval is not None else 0
    request = admin_pb2.WatchStatusRequest(flow=args.flow or "", interval_ms=interval_ms)
    tty = sys.stdout.isatty()
    address = connection.server
    for attempt in range(2):
        with grpcsecure.blocking_channel(address, connection.credentials) as channel:
            stream = admin_pb2_grpc.AdminStub(channel).WatchStatus(request)
            timed_out = threading.Event()

            def give_up(stream: Any = stream, timed_out: threading.Event = timed_out) -> None:
                timed_out.set()
                stream.cancel()

            timer = threading.Timer(connection.timeout, give_up)
            timer.daemon = True
            timer.start()
            first = True
            try:
                for report in stream:
                    if first:
                        timer.cancel()
                    sys.stdout.write(watch_frame(report, output=args.output, tty=tty,
                                                 first=first))
                    sys.stdout.flush()
                    first = False
                return 0
            except KeyboardInterrupt:
                stream.cancel()
                return 0
            except grpc.RpcError as exc:
                if first and timed_out.is_set():
                    if not _reached(channel):
                        raise AdminError(unreachable_message(
                            address, f"no status report within {connection.timeout:g}s")
                        ) from None
                    raise AdminError(f"DEADLINE_EXCEEDED: no status report within "
                                     f"{connection.timeout:g}s") from None
                leader = _follow(connection, address, _redirect_of(exc, address)
                                 if first and attempt == 0 else None)
                if leader is None:
                    raise _failure(exc, address, channel) from None
                address = leader
            finally:
                timer.cancel()
    raise AssertionError("unreachable")  # pragma: no cover


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

    status = leaf(admin_sub, "status", _status, "replication status: flows and partitions")
    status.add_argument("--flow", type=parse_flow_name, metavar="NAME",
                        help="only this flow (SOURCE->TARGET)")
    status.add_argument("--watch", action="store_true",
                        help="keep showing new reports until Ctrl-C")
    status.add_argument("--interval", type=_min_interval, metavar="SECONDS",
                        help="seconds between reports with --watch (default: the "
                             "controller's, 2)")

    leaf(admin_sub, "workers", _workers, "replicator workers and their partitions")
    history = leaf(admin_sub, "history", _history,
                   "the audit trail: who changed what, newest last")
    history.add_argument("--flow", type=parse_flow_name, metavar="FLOW",
                         help="only calls about this flow")
    history.add_argument("--limit", type=int, default=100, metavar="N",
                         help="newest N entries (default 100)")
    admin_security.register_token(admin_sub)

    from mirrorline.cli import admin_heartbeat

    admin_heartbeat.register(admin_sub, leaf)

    def group(name: str, help_text: str) -> Any:
        parser = admin_sub.add_parser(name, parents=[common], help=help_text)
        parser.set_defaults(handler=_help_for(parser), command_parser=parser)
        return parser.add_subparsers(dest=f"{name}_command", metavar="ACTION")

    def flow_argument(parser: argparse.ArgumentParser, help_text: str) -> None:
        parser.add_argument("flow", type=parse_flow_name, metavar="FLOW", help=help_text)

    def groups_option(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--group", dest="groups", type=non_blank("group"), action="append",
                            required=True, metavar="GROUP",
                            help="consumer group (repeatable; at least one)")

    partitions.register(group("partitions", "where partitions run: the replicator workers "
                                            "or the Spark executor"), leaf, _unary)

    offsets_sub = group("offsets", "consumer group offsets across a flow")
    translate = leaf(offsets_sub, "translate", _offsets_translate,
                     "show where a group's source offsets are on the target")
    flow_argument(translate, "the flow, SOURCE->TARGET")
    translate.add_argument("--group", type=non_blank("group"), required=True, metavar="GROUP",
                           help="consumer group")

    failover_sub = group("failover", "move consumer groups from a flow's source to its "
                                     "target")
    plan = leaf(failover_sub, "plan", _failover_plan,
                "report whether the groups can fail over now, and at what cost "
                "(changes nothing)")
    flow_argument(plan, "the flow to fail over, SOURCE->TARGET")
    groups_option(plan)

    execute = leaf(failover_sub, "execute", _failover_execute,
                   "commit the groups' translated offsets on the target")
    flow_argument(execute, "the flow to fail over, SOURCE->TARGET")
    groups_option(execute)
    execute.add_argument(
        "--mode", choices=tuple(FAILOVER_MODES), required=True,
        help="drain: planned failover, wait until every record is mirrored, then commit "
             "exact offsets; now: unplanned failover, commit what can be translated at "
             "once (records not mirrored yet are not on the target; some may be repeated)")
    execute.add_argument(
        "--drain-timeout", type=positive_seconds, metavar="SECONDS",
        help=f"with --mode drain: how long the server waits for the drain (default: "
             f"{DEFAULT_DRAIN_TIMEOUT:g}); the call's deadline is at least this plus "
             f"{DRAIN_DEADLINE_MARGIN:g}")

    to_time = leaf(failover_sub, "to-time", _failover_to_time,
                   "commit offsets on the target at the first records at or after a time")
    flow_argument(to_time, "the flow to fail over, SOURCE->TARGET")
    groups_option(to_time)
    to_time.add_argument(
        "--time", type=parse_time, required=True, metavar="TIME",
        help="epoch milliseconds, or ISO 8601 with a zone (2026-11-21T04:03:00Z, "
             "'2026-11-21 04:03:00+02:00')")

    failback_sub = group("failback", "mirror back to the old primary after a failover")
    back_plan = leaf(failback_sub, "plan", _failback_plan,
                     "what a failback would do: reverse flow, diverged records, groups "
                     "(changes nothing)")
    flow_argument(back_plan, "the flow that was failed over from, e.g. primary->backup")

    back_execute = leaf(failback_sub, "execute", _failback_execute,
                        "create the reverse flow, scraping the old primary first if asked")
    flow_argument(back_execute, "the flow that was failed over from, e.g. primary->backup")
    back_execute.add_argument(
        "--scrape", action="store_true",
        help="first delete the old primary's data and committed offsets of the topics "
             "(needs --confirm)")
    back_execute.add_argument(
        "--confirm", type=non_blank("confirmation text"), metavar="TEXT",
        help="with --scrape: the text printed by `failback plan`")
    back_execute.add_argument(
        "--topic", dest="topics", type=non_blank("topic"), action="append", metavar="TOPIC",
        help="with --scrape: scrape only this topic (repeatable; default: every topic of "
             "the flow)")

    from mirrorline.cli import admin_drift  # its handlers call back into this module

    admin_drift.register(admin_sub, common)


def _min_interval(text: str) -> float:
    value = positive_seconds(text)
    if value < 0.2:
        raise argparse.ArgumentTypeError(f"{text!r}: the interval is at least 0.2 seconds")
    return value
